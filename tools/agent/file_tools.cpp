// The agent's file tools: see file_tools.h.
#include "agent/file_tools.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>
#include <zlib.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/format.h"

namespace fs = std::filesystem;

namespace magnetar::agent {

namespace {

tool_result fail(std::string text) {
    return {false, std::move(text)};
}

uint32_t crc_of(std::string_view line) {
    return static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(line.data()), static_cast<uInt>(line.size())));
}

// The lines of `text` without their '\n' (a final newline ends the last line, it does not
// start another).
std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> out;
    size_t at = 0;
    while (at < text.size()) {
        const size_t nl = text.find('\n', at);
        if (nl == std::string_view::npos) {
            out.push_back(text.substr(at));
            break;
        }
        out.push_back(text.substr(at, nl - at));
        at = nl + 1;
    }
    return out;
}

bool looks_binary(std::string_view text) {
    return text.substr(0, 8192).find('\0') != std::string_view::npos;
}

// Creates the folders of `target`, then writes it through write_atomically.
bool write_with_folders(const fs::path& target, const std::string& content, std::string* why) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
        *why = "cannot create " + target.parent_path().string() + ": " + ec.message();
        return false;
    }
    return write_atomically(target, content, 0666, why);
}

std::string join_lines(const std::vector<std::string_view>& lines, bool final_newline) {
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        out.append(lines[i]);
        if (i + 1 < lines.size() || final_newline) out.push_back('\n');
    }
    return out;
}

}  // namespace

std::optional<std::string> file_tools::load(const std::string& path, std::string* resolved,
                                            tool_result* err) const {
    std::string why;
    const fs::path p = ws_.resolve(path, &why);
    if (p.empty()) {
        *err = fail("error: " + why);
        return std::nullopt;
    }
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
        *err = fail("error: " + ws_.display(p) +
                    (fs::exists(p, ec) ? " is not a regular file" : " does not exist"));
        return std::nullopt;
    }
    const uint64_t size = fs::file_size(p, ec);
    if (ec || size > lim_.max_file_bytes) {
        *err = fail(strfmt("error: %s is %s, more than the %s a file tool reads",
                           ws_.display(p).c_str(), human_bytes(size).c_str(),
                           human_bytes(lim_.max_file_bytes).c_str()));
        return std::nullopt;
    }
    std::ifstream in(p, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
        *err = fail("error: cannot read " + ws_.display(p));
        return std::nullopt;
    }
    *resolved = p.string();
    return text;
}

tool_result file_tools::window(const std::string& name, const std::string& text, int64_t offset,
                               int64_t limit, bool whole, shown_file& sf) {
    const std::vector<std::string_view> lines = split_lines(text);
    const int64_t n = static_cast<int64_t>(lines.size());
    sf.n_lines = n;
    if (n == 0) return {true, "[" + name + ": empty file]"};
    if (offset < 1 || offset > n) {
        return fail(strfmt("error: %s has %lld lines; offset %lld is outside 1..%lld", name.c_str(),
                           static_cast<long long>(n), static_cast<long long>(offset),
                           static_cast<long long>(n)));
    }
    const int64_t want = whole ? n - offset + 1 : (limit > 0 ? limit : lim_.read_lines);
    const int64_t last_wanted = std::min(n, offset + want - 1);
    std::string out;
    int64_t last = offset - 1;
    for (int64_t ln = offset; ln <= last_wanted; ++ln) {
        const std::string_view line = lines[static_cast<size_t>(ln - 1)];
        const bool cut = static_cast<int64_t>(line.size()) > lim_.max_line_chars;
        std::string row = strfmt("%6lld\t", static_cast<long long>(ln));
        row.append(cut ? line.substr(0, static_cast<size_t>(lim_.max_line_chars)) : line);
        if (cut) row += strfmt(" [line cut: %zu characters]", line.size());
        row.push_back('\n');
        if (out.size() + row.size() > lim_.max_result_bytes) {
            if (whole) {
                return fail(strfmt(
                    "error: %s (%lld lines, %s) does not fit in one result of at "
                    "most %s; read it in windows (offset, limit)",
                    name.c_str(), static_cast<long long>(n), human_bytes(text.size()).c_str(),
                    human_bytes(lim_.max_result_bytes).c_str()));
            }
            break;
        }
        out += row;
        // A line shown whole can be edited by its number; a cut one only by its text.
        if (cut) {
            sf.crc.erase(ln);
        } else {
            sf.crc[ln] = crc_of(line);
        }
        last = ln;
    }
    if (last < offset) {
        return fail(strfmt("error: line %lld of %s alone does not fit in one result",
                           static_cast<long long>(offset), name.c_str()));
    }
    sf.next_line = last + 1;
    out += strfmt("[%s: lines %lld-%lld of %lld", name.c_str(), static_cast<long long>(offset),
                  static_cast<long long>(last), static_cast<long long>(n));
    out += last < n ? strfmt("; `more` continues at line %lld]", static_cast<long long>(last + 1))
                    : std::string("]");
    return {true, out};
}

tool_result file_tools::read(const std::string& path, int64_t offset, int64_t limit, bool whole) {
    tool_result err;
    std::string resolved;
    const std::optional<std::string> text = load(path, &resolved, &err);
    if (!text) return err;
    const std::string name = ws_.display(resolved);
    if (looks_binary(*text)) {
        return fail(strfmt("error: %s looks binary (%s with NUL bytes); not shown", name.c_str(),
                           human_bytes(text->size()).c_str()));
    }
    last_read_ = resolved;
    return window(name, *text, offset < 1 ? 1 : offset, limit, whole, shown_[resolved]);
}

tool_result file_tools::more(const std::string& path) {
    std::string key = last_read_;
    if (!path.empty()) {
        std::string why;
        const fs::path p = ws_.resolve(path, &why);
        if (p.empty()) return fail("error: " + why);
        key = p.string();
    }
    const auto it = shown_.find(key);
    if (key.empty() || it == shown_.end()) return fail("error: nothing was read yet to continue");
    if (it->second.next_line > it->second.n_lines) {
        return {true, "[" + ws_.display(key) + ": already shown to its end]"};
    }
    return read(key, it->second.next_line, 0, false);
}

tool_result file_tools::write(const std::string& path, const std::string& content) {
    std::string why;
    const fs::path p = ws_.resolve(path, &why);
    if (p.empty()) return fail("error: " + why);
    std::error_code ec;
    if (fs::is_directory(p, ec)) return fail("error: " + ws_.display(p) + " is a directory");
    if (content.size() > lim_.max_file_bytes) {
        return fail(strfmt("error: %s of content is more than the %s a file tool writes",
                           human_bytes(content.size()).c_str(),
                           human_bytes(lim_.max_file_bytes).c_str()));
    }
    const bool existed = fs::exists(p, ec);
    if (!write_with_folders(p, content, &why)) return fail("error: " + why);
    // The model wrote these lines: it may edit them by number.
    shown_file& sf = shown_[p.string()];
    sf = shown_file{};
    const std::vector<std::string_view> lines = split_lines(content);
    for (size_t i = 0; i < lines.size(); ++i)
        sf.crc[static_cast<int64_t>(i) + 1] = crc_of(lines[i]);
    sf.n_lines = static_cast<int64_t>(lines.size());
    sf.next_line = sf.n_lines + 1;
    return {true, strfmt("%s %s: %zu bytes, %zu lines", existed ? "replaced" : "created",
                         ws_.display(p).c_str(), content.size(), lines.size())};
}

tool_result file_tools::edit_text(const std::string& path, const std::string& old_text,
                                  const std::string& new_text) {
    if (old_text.empty()) return fail("error: edit: old text is empty");
    tool_result err;
    std::string resolved;
    const std::optional<std::string> text = load(path, &resolved, &err);
    if (!text) return err;
    const std::string name = ws_.display(resolved);
    size_t count = 0, first = std::string::npos;
    for (size_t at = text->find(old_text); at != std::string::npos;
         at = text->find(old_text, at + old_text.size())) {
        if (count++ == 0) first = at;
    }
    if (count == 0) {
        return fail("error: edit: the old text does not occur in " + name +
                    " (it must match exactly, whitespace included; read the file again)");
    }
    if (count > 1) {
        return fail(
            strfmt("error: edit: the old text occurs %zu times in %s; give more "
                   "surrounding text so that it is unique",
                   count, name.c_str()));
    }
    std::string out = text->substr(0, first) + new_text + text->substr(first + old_text.size());
    std::string why;
    if (!write_with_folders(resolved, out, &why)) return fail("error: " + why);
    const int64_t line =
        1 + std::count(text->begin(), text->begin() + static_cast<long>(first), '\n');
    const int64_t added = std::count(new_text.begin(), new_text.end(), '\n');
    // Line numbers after the edit moved: what was shown there no longer holds.
    shown_.erase(resolved);
    return {true, strfmt("edited %s: one occurrence at line %lld replaced (%lld line%s now)",
                         name.c_str(), static_cast<long long>(line),
                         static_cast<long long>(added + 1), added == 0 ? "" : "s")};
}

tool_result file_tools::edit_lines(const std::string& path, int64_t first, int64_t last,
                                   const std::string& new_text) {
    tool_result err;
    std::string resolved;
    const std::optional<std::string> text = load(path, &resolved, &err);
    if (!text) return err;
    const std::string name = ws_.display(resolved);
    const std::vector<std::string_view> lines = split_lines(*text);
    const int64_t n = static_cast<int64_t>(lines.size());
    if (first < 1 || first > n + 1 || last < first - 1 || last > n) {
        return fail(
            strfmt("error: edit: lines %lld-%lld are not a range of %s (1..%lld; "
                   "last = first - 1 inserts)",
                   static_cast<long long>(first), static_cast<long long>(last), name.c_str(),
                   static_cast<long long>(n)));
    }
    const auto it = shown_.find(resolved);
    // The lines replaced, or for an insertion the line before it, must be as they were shown.
    const int64_t check_from = last >= first ? first : std::max<int64_t>(1, first - 1);
    const int64_t check_to = last >= first ? last : std::min<int64_t>(n, first - 1);
    for (int64_t ln = check_from; ln <= check_to; ++ln) {
        const uint32_t now = crc_of(lines[static_cast<size_t>(ln - 1)]);
        if (it == shown_.end() || !it->second.crc.count(ln)) {
            return fail(
                strfmt("error: edit: line %lld of %s was never shown whole; read it "
                       "first (or edit by exact text)",
                       static_cast<long long>(ln), name.c_str()));
        }
        if (it->second.crc.at(ln) != now) {
            return fail(
                strfmt("error: edit: line %lld of %s changed since it was shown; read it "
                       "again",
                       static_cast<long long>(ln), name.c_str()));
        }
    }
    const std::vector<std::string_view> fresh = split_lines(new_text);
    std::vector<std::string_view> out(lines.begin(), lines.begin() + (first - 1));
    out.insert(out.end(), fresh.begin(), fresh.end());
    out.insert(out.end(), lines.begin() + last, lines.end());
    const bool final_newline = text->empty() ? true : text->back() == '\n' || last < n;
    const std::string written = join_lines(out, final_newline || out.empty());
    std::string why;
    if (!write_with_folders(resolved, written, &why)) return fail("error: " + why);
    // Shown lines before the range keep their numbers, the new ones were written by the model,
    // the ones after it move by the difference.
    shown_file& sf = shown_[resolved];
    const int64_t delta = static_cast<int64_t>(fresh.size()) - (last - first + 1);
    std::map<int64_t, uint32_t> crc;
    for (const auto& [ln, c] : sf.crc) {
        if (ln < first) crc[ln] = c;
        if (ln > last) crc[ln + delta] = c;
    }
    for (size_t i = 0; i < fresh.size(); ++i)
        crc[first + static_cast<int64_t>(i)] = crc_of(fresh[i]);
    sf.crc = std::move(crc);
    sf.n_lines = static_cast<int64_t>(out.size());
    return {true,
            strfmt("edited %s: lines %lld-%lld replaced by %zu line%s (%lld lines now)",
                   name.c_str(), static_cast<long long>(first), static_cast<long long>(last),
                   fresh.size(), fresh.size() == 1 ? "" : "s", static_cast<long long>(out.size()))};
}

tool_result file_tools::search(const std::string& pattern, const std::string& path, bool regex,
                               const std::string& glob, int max_results) {
    if (pattern.empty()) return fail("error: search: empty pattern");
    const int cap =
        max_results > 0 ? std::min(max_results, lim_.search_results_max) : lim_.search_results;
    std::string why;
    const fs::path base = ws_.resolve(path.empty() ? "." : path, &why);
    if (base.empty()) return fail("error: " + why);
    std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> re(nullptr, pcre2_code_free);
    if (regex) {
        int code = 0;
        PCRE2_SIZE at = 0;
        re.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                               PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &code, &at, nullptr));
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            return fail(strfmt("error: search: bad regular expression at offset %zu: %s",
                               static_cast<size_t>(at), reinterpret_cast<const char*>(msg)));
        }
    }
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        re ? pcre2_match_data_create_from_pattern(re.get(), nullptr) : nullptr,
        pcre2_match_data_free);

    std::vector<fs::path> files;
    std::error_code ec;
    if (fs::is_regular_file(base, ec)) {
        files.push_back(base);
    } else if (fs::is_directory(base, ec)) {
        fs::recursive_directory_iterator it(base, fs::directory_options::skip_permission_denied,
                                            ec);
        for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            const fs::directory_entry& e = *it;
            if (e.is_directory(ec) && e.path().filename() == ".git") {
                it.disable_recursion_pending();
                continue;
            }
            if (!e.is_regular_file(ec) || e.is_symlink(ec)) continue;
            if (!glob.empty()) {
                const std::string rel = ws_.display(e.path());
                const std::string fname = e.path().filename().string();
                const bool hit = glob.find('/') != std::string::npos
                                     ? fnmatch(glob.c_str(), rel.c_str(), 0) == 0
                                     : fnmatch(glob.c_str(), fname.c_str(), 0) == 0;
                if (!hit) continue;
            }
            files.push_back(e.path());
        }
    } else {
        return fail("error: search: " + ws_.display(base) + " does not exist");
    }
    std::sort(files.begin(), files.end());
    std::string out;
    int hits = 0;
    size_t files_hit = 0;
    bool capped = false;
    for (const fs::path& f : files) {
        if (fs::file_size(f, ec) > lim_.max_file_bytes || ec) continue;
        std::ifstream in(f, std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (looks_binary(text)) continue;
        const std::vector<std::string_view> lines = split_lines(text);
        bool any = false;
        for (size_t i = 0; i < lines.size() && !capped; ++i) {
            const std::string_view line = lines[i];
            const bool match = re ? pcre2_match(re.get(), reinterpret_cast<PCRE2_SPTR>(line.data()),
                                                line.size(), 0, 0, md.get(), nullptr) >= 0
                                  : line.find(pattern) != std::string_view::npos;
            if (!match) continue;
            any = true;
            const bool cut = line.size() > 300;
            out += strfmt("%s:%zu: ", ws_.display(f).c_str(), i + 1);
            out.append(cut ? line.substr(0, 300) : line);
            if (cut) out += " [cut]";
            out.push_back('\n');
            if (++hits >= cap) capped = true;
        }
        files_hit += any;
        if (capped) break;
    }
    if (hits == 0) return {true, "[no match in " + ws_.display(base) + "]"};
    out += capped ? strfmt("[%d matches shown: the cap; narrow the pattern, path or glob]", hits)
                  : strfmt("[%d match%s in %zu file%s]", hits, hits == 1 ? "" : "es", files_hit,
                           files_hit == 1 ? "" : "s");
    return {true, out};
}

tool_result file_tools::list(const std::string& path) {
    std::string why;
    const fs::path p = ws_.resolve(path.empty() ? "." : path, &why);
    if (p.empty()) return fail("error: " + why);
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
        return fail("error: " + ws_.display(p) +
                    (fs::exists(p, ec) ? " is not a directory" : " does not exist"));
    }
    std::vector<std::string> rows;
    for (const fs::directory_entry& e : fs::directory_iterator(p, ec)) {
        std::string name = e.path().filename().string();
        if (e.is_symlink(ec)) {
            name += " -> " + fs::read_symlink(e.path(), ec).string();
        } else if (e.is_directory(ec)) {
            name += "/";
        } else if (e.is_regular_file(ec)) {
            name += "  (" + human_bytes(e.file_size(ec)) + ")";
        }
        rows.push_back(std::move(name));
    }
    std::sort(rows.begin(), rows.end());
    std::string out;
    const size_t shown = std::min<size_t>(rows.size(), static_cast<size_t>(lim_.list_entries));
    for (size_t i = 0; i < shown; ++i) out += rows[i] + "\n";
    out += rows.size() > shown ? strfmt("[%s: %zu of %zu entries shown]", ws_.display(p).c_str(),
                                        shown, rows.size())
                               : strfmt("[%s: %zu entr%s]", ws_.display(p).c_str(), rows.size(),
                                        rows.size() == 1 ? "y" : "ies");
    return {true, out};
}

bool write_atomically(const fs::path& target, const std::string& content, unsigned mode,
                      std::string* why) {
    const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".agent-tmp." +
                                                 std::to_string(::getpid()));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          static_cast<mode_t>(mode));
    if (fd < 0) {
        *why = "cannot create " + tmp.string() + ": " + std::strerror(errno);
        return false;
    }
    size_t done = 0;
    bool ok = true;
    while (ok && done < content.size()) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            ok = false;
        else
            done += static_cast<size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    const std::string err = std::strerror(errno);
    ok = ::close(fd) == 0 && ok;
    if (!ok) {
        ::unlink(tmp.c_str());
        *why = "cannot write " + target.string() + ": " + err;
        return false;
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        *why = "cannot replace " + target.string() + ": " + std::strerror(errno);
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace magnetar::agent
