// The disk KV cache directory: safety checks, index, lookup, saving and eviction (kv_store.h).
#include "kvstore/kv_store.h"

#include <dirent.h>
#include <openssl/sha.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"

namespace magnetar::kvstore {

model_identity identity_of_model(const std::string& gguf_path) {
    const std::unique_ptr<gguf::reader> r = gguf::reader::open(gguf_path);
    std::string canon;
    if (const gguf::value* v = r->find("general.name")) canon += v->s;
    canon += '\n';
    model_identity id;
    for (const gguf::tensor_info& t : r->tensors()) {
        canon += t.name;
        for (uint32_t d = 0; d < t.n_dims; ++d)
            canon += strfmt(" %lld", static_cast<long long>(t.ne[d]));
        canon += '\n';
        if (t.name.find("ffn_gate_exps") != std::string::npos)
            id.quant_bits = t.type == ggml_type::Q4_K ? 4 : 2;
    }
    for (const char* name : {"token_embd.weight", "output.weight"}) {
        if (const gguf::tensor_info* t = r->find_tensor(name)) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(t->n_bytes, 64u << 10));
            canon.append(reinterpret_cast<const char*>(r->tensor_data(*t)), n);
        }
    }
    uint8_t d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(canon.data()), canon.size(), d);
    std::memcpy(&id.fingerprint, d, 8);
    return id;
}

double eviction_score(const file_info& e, uint64_t now) {
    const uint64_t t = e.header.last_used ? e.header.last_used : e.header.created;
    double hits = 0;
    if (t != 0 && now != 0) {
        const double age = static_cast<double>(now) - static_cast<double>(t);
        hits = e.header.hits * std::pow(2.0, -age / 21600.0);
        if (hits < 0.01) hits = 0;
    }
    return (hits + 1.0) * e.header.tokens / static_cast<double>(std::max<uint64_t>(e.file_size, 1));
}

namespace {

// Whether the writer named by a temp file may still be running (kill(pid, 0): EPERM means a
// process exists that we may not signal). Our own pid counts as finished: one store per
// process, so a temp file with our pid is a leftover of an earlier process that had it.
bool writer_may_run(long pid) {
    if (pid <= 0 || pid == static_cast<long>(::getpid())) return false;
    return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

constexpr int64_t k_stale_temp_s = 3600;  // a temp file untouched this long is abandoned

}  // namespace

store::store(store_options opts, model_identity id, log_fn log)
    : opts_(std::move(opts)), id_(id), log_(std::move(log)) {
    if (opts_.dir.empty()) throw Error("kv store: no directory given");
    check_directory();
    scan();
    enforce_budget();
}

// The directory holds other users' prompts once shared, and whoever can write it can plant
// files or links under our names: it must be this user's own (a symbolic link to it is fine
// when the link is ours or root's) and not writable by others. Group-writable is only warned
// about: with per-user groups (umask 002) that is the normal mode of a user's directories.
void store::check_directory() {
    const char* d = opts_.dir.c_str();
    if (::mkdir(d, 0700) != 0 && errno != EEXIST)
        throw Error(strfmt("kv store: cannot create %s: %s", d, std::strerror(errno)));
    const uid_t me = ::geteuid();
    struct stat lsb, sb;
    if (::lstat(d, &lsb) != 0 || ::stat(d, &sb) != 0)
        throw Error(strfmt("kv store: cannot stat %s: %s", d, std::strerror(errno)));
    if (S_ISLNK(lsb.st_mode) && lsb.st_uid != me && lsb.st_uid != 0)
        throw Error(
            strfmt("kv store: %s is a symbolic link owned by uid %u, not by this user "
                   "(uid %u); give the directory itself",
                   d, static_cast<unsigned>(lsb.st_uid), static_cast<unsigned>(me)));
    if (!S_ISDIR(sb.st_mode))
        throw Error(strfmt("kv store: %s is not a directory (%s)", d, file_kind(sb.st_mode)));
    if (sb.st_uid != me)
        throw Error(
            strfmt("kv store: %s belongs to uid %u, not to this user (uid %u); use a "
                   "directory of your own",
                   d, static_cast<unsigned>(sb.st_uid), static_cast<unsigned>(me)));
    if (sb.st_mode & S_IWOTH)
        throw Error(
            strfmt("kv store: %s is writable by every user (mode %04o); chmod 700 it or "
                   "use another directory",
                   d, static_cast<unsigned>(sb.st_mode & 07777)));
    if (sb.st_mode & S_IWGRP)
        log(strfmt("kv store: warning: %s is group-writable (mode %04o); chmod 700 is safer", d,
                   static_cast<unsigned>(sb.st_mode & 07777)));
}

void store::log(const std::string& line) const {
    if (log_) log_(line);
}

void store::scan() {
    index_.clear();
    DIR* d = ::opendir(opts_.dir.c_str());
    if (!d)
        throw Error(
            strfmt("kv store: cannot read %s: %s", opts_.dir.c_str(), std::strerror(errno)));
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    size_t foreign = 0;
    uint64_t foreign_bytes = 0;
    const int64_t now = static_cast<int64_t>(unix_now());
    for (const std::string& n : names) {
        const std::string path = opts_.dir + "/" + n;
        long pid = 0;
        const bool temp = is_temp_name(n, &pid);
        if (!temp && !is_entry_name(n)) continue;  // not ours
        // lstat only: nothing is opened (or followed) before it is known to be a regular file.
        struct stat sb;
        if (::lstat(path.c_str(), &sb) != 0) continue;  // gone meanwhile
        if (!S_ISREG(sb.st_mode)) {
            log(strfmt("kv store: skipped %s: a %s, not a cache file (left in place)", n.c_str(),
                       file_kind(sb.st_mode)));
            continue;
        }
        if (temp) {
            // A write that never finished (crash, kill) is never valid; one of another live
            // process (a second server on this directory) may still be in progress.
            if (sb.st_uid != ::geteuid()) continue;
            if (writer_may_run(pid) && now - static_cast<int64_t>(sb.st_mtime) < k_stale_temp_s)
                continue;
            ::unlink(path.c_str());
            log("kv store: removed unfinished write " + n);
            continue;
        }
        file_info fi;
        const status st = inspect_file(path, &fi);
        if (!st.ok()) {
            if (st.code() == status_code::bad_payload) {
                ::unlink(path.c_str());
                log("kv store: removed invalid file: " + st.message());
            } else {
                log("kv store: skipped " + st.message());
            }
            continue;
        }
        if (fi.fingerprint != id_.fingerprint) {
            // Another model's entry (two servers, one directory): its store manages it.
            ++foreign;
            foreign_bytes += fi.file_size;
            continue;
        }
        index_[path] = fi;
    }
    if (foreign > 0)
        log(
            strfmt("kv store: left alone %zu entries (%.1f MiB) written for other models; the "
                   "budget counts only this model's",
                   foreign, static_cast<double>(foreign_bytes) / (1 << 20)));
}

std::vector<file_info> store::entries() const {
    std::vector<file_info> out;
    for (const auto& [p, fi] : index_) out.push_back(fi);
    return out;
}

void store::stored_tools(const std::function<void(tool_map& map)>& per_file) const {
    std::vector<const file_info*> with_map;
    for (const auto& [p, fi] : index_) {
        if (fi.header.ext & k_ext_tool_map) with_map.push_back(&fi);
    }
    std::sort(with_map.begin(), with_map.end(), [](const file_info* a, const file_info* b) {
        return a->header.last_used < b->header.last_used;
    });
    for (const file_info* fi : with_map) {
        tool_map one;
        if (const status st = read_tool_map(fi->path, &one); !st.ok()) {
            log("kv store: tool-id map skipped: " + st.message());
            continue;
        }
        per_file(one);
    }
}

uint64_t store::total_bytes() const {
    uint64_t b = 0;
    for (const auto& [p, fi] : index_) b += fi.file_size;
    return b;
}

bool store::remove(const std::string& path, const std::string& why) {
    const auto it = index_.find(path);
    if (it == index_.end()) return false;
    ::unlink(path.c_str());
    log("kv store: removed " + it->second.name + ".kv (" + why + ")");
    index_.erase(it);
    return true;
}

void store::enforce_budget(const std::string& protect) {
    const uint64_t now = unix_now();
    while (total_bytes() > opts_.budget_bytes && !index_.empty()) {
        const file_info* victim = nullptr;
        double vs = 0;
        for (const auto& [p, fi] : index_) {
            if (p == protect && index_.size() > 1) continue;
            const double s = eviction_score(fi, now);
            const uint64_t t = fi.header.last_used ? fi.header.last_used : fi.header.created;
            const uint64_t vt = victim ? (victim->header.last_used ? victim->header.last_used
                                                                   : victim->header.created)
                                       : 0;
            if (!victim || s < vs || (s == vs && t < vt)) {
                victim = &fi;
                vs = s;
            }
        }
        if (!victim) break;
        remove(victim->path, "over the disk budget");
    }
}

bool store::save(const Session& session, std::string_view key_text, save_reason reason,
                 uint8_t key_flags, const tool_map* tools) {
    const int64_t n = session.n_past();
    if (n < static_cast<int64_t>(opts_.min_tokens)) {
        log(strfmt("kv store: not saving %lld tokens (minimum %u)", static_cast<long long>(n),
                   opts_.min_tokens));
        return false;
    }
    uint64_t size =
        k_header_bytes + 4 + key_text.size() + session.payload_size() + k_integrity_bytes;
    if (tools)
        for (const auto& [a, b] : *tools) size += 8 + a.size() + b.size();
    if (size + (size + 99) / 100 > opts_.budget_bytes) {
        log(strfmt("kv store: not saving %llu bytes (budget %llu)",
                   static_cast<unsigned long long>(size),
                   static_cast<unsigned long long>(opts_.budget_bytes)));
        return false;
    }
    // The name is the key text's SHA-1 only, so another model's entry for the same text may
    // hold it: that one is not ours to replace (nor is anything but a regular file).
    const std::string target = opts_.dir + "/" + file_name_for(key_text);
    struct stat sb;
    if (index_.count(target) == 0 && ::lstat(target.c_str(), &sb) == 0) {
        file_info other;
        if (!S_ISREG(sb.st_mode)) {
            log(strfmt("kv store: not saving over %s: a %s", target.c_str(),
                       file_kind(sb.st_mode)));
            return false;
        }
        if (inspect_file(target, &other).ok() && other.fingerprint != id_.fingerprint) {
            log("kv store: not saving over " + other.name + ".kv: written for another model");
            return false;
        }
    }
    write_request req;
    req.key_text = key_text;
    req.reason = reason;
    req.key_flags = key_flags;
    req.tools = tools;
    std::string path;
    const status st = write_file(opts_.dir, session, id_, req, &path);
    if (!st.ok()) {
        log("kv store: save failed: " + st.message());
        return false;
    }
    file_info fi;
    const status si = inspect_file(path, &fi);
    if (!si.ok()) {
        ::unlink(path.c_str());
        index_.erase(path);
        log("kv store: saved file does not read back: " + si.message());
        return false;
    }
    index_[path] = fi;
    log(strfmt("kv store: saved %lld tokens (%s, %llu bytes) as %s.kv", static_cast<long long>(n),
               reason_name(reason), static_cast<unsigned long long>(fi.file_size),
               fi.name.c_str()));
    enforce_budget(path);
    return true;
}

bool store::load_longest_prefix(std::string_view text, Session& session, hit* out,
                                const accept_fn& accept) {
    std::vector<const file_info*> cands;
    for (const auto& [p, fi] : index_) {
        if (fi.text_len > text.size() || fi.header.tokens < opts_.min_tokens) continue;
        if (fi.header.ctx > session.n_ctx() || fi.header.tokens >= session.n_ctx()) continue;
        if (opts_.reject_different_quant && fi.header.quant_bits != id_.quant_bits) continue;
        cands.push_back(&fi);
    }
    std::sort(cands.begin(), cands.end(), [](const file_info* a, const file_info* b) {
        if (a->text_len != b->text_len) return a->text_len > b->text_len;
        return a->header.tokens > b->header.tokens;
    });
    std::vector<std::string> failed, forgotten;
    bool loaded = false;
    for (const file_info* fi : cands) {
        if (sha1_hex(text.substr(0, fi->text_len)) != fi->name) continue;
        // The name may have changed since the scan: a file of another model (a second server
        // saved the same text) or something that is not a regular file is forgotten, not
        // removed; a damaged file is removed.
        file_info now_fi;
        const status si = inspect_file(fi->path, &now_fi);
        if (si.ok() && now_fi.fingerprint != id_.fingerprint) {
            forgotten.push_back(fi->path);
            log("kv store: " + fi->name + ".kv now belongs to another model; left alone");
            continue;
        }
        if (!si.ok() && si.code() != status_code::bad_payload) {
            forgotten.push_back(fi->path);
            log("kv store: cannot load: " + si.message());
            continue;
        }
        hit h;
        const status st = si.ok() ? load_file(fi->path, session, id_, &h.key_text, &h.tools) : si;
        if (!st.ok()) {
            if (st.code() == status_code::bad_payload) failed.push_back(fi->path);
            log("kv store: cannot load: " + st.message());
            continue;
        }
        if (text.substr(0, h.key_text.size()) != h.key_text) {  // SHA-1 collision guard
            session.reset();
            continue;
        }
        if (accept && !accept(h.key_text, session.tokens())) {
            session.reset();
            log("kv store: not reusing " + fi->name +
                ".kv: its control tokens differ from the "
                "prompt's");
            continue;
        }
        h.path = fi->path;
        h.tokens = fi->header.tokens;
        // The access time only orders eviction: a file it cannot be set on is still used.
        if (const status t = touch_file(fi->path); !t.ok()) log("kv store: " + t.message());
        file_info updated;
        if (inspect_file(fi->path, &updated).ok()) index_[fi->path] = updated;
        if (out) *out = std::move(h);
        loaded = true;
        break;
    }
    for (const std::string& p : failed) remove(p, "failed to load");
    for (const std::string& p : forgotten) index_.erase(p);
    return loaded;
}

}  // namespace magnetar::kvstore
