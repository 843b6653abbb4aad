// `magnetar kv ls|show|verify|rm`: inspect and maintain a disk KV cache directory
// (src/kvstore, docs/kvcache.md).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/format.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

bool is_dir(const std::string& p) {
    struct stat sb;
    return ::stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

// The entries (names "<40 hex>.kv") of a directory, or the one file named (a symbolic link
// named on the command line is followed here; inside a directory none is). Whatever is not a
// regular file is listed too and reported by kvstore as such, never opened in a way that blocks.
std::vector<std::string> kv_paths(const std::string& where) {
    if (!is_dir(where)) {
        if (::access(where.c_str(), R_OK) != 0)
            throw Error("kv: no such file or directory: " + where);
        char real[PATH_MAX];
        return {::realpath(where.c_str(), real) ? std::string(real) : where};
    }
    std::vector<std::string> out;
    DIR* d = ::opendir(where.c_str());
    if (!d) throw Error("kv: cannot read " + where);
    while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (kvstore::is_entry_name(n)) out.push_back(where + "/" + n);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

// A file given as a path, or as a (prefix of a) SHA-1 name inside dir.
std::string resolve_entry(const std::string& dir, const std::string& what) {
    if (!is_dir(dir)) return dir;
    if (what.empty()) throw Error("kv: name a file (its SHA-1 or a unique prefix)");
    std::string found;
    for (const std::string& p : kv_paths(dir)) {
        const std::string n = p.substr(p.size() - 43, 40);
        if (n.compare(0, what.size(), what) == 0) {
            if (!found.empty()) throw Error("kv: '" + what + "' matches more than one file");
            found = p;
        }
    }
    if (found.empty()) throw Error("kv: no file matches '" + what + "' in " + dir);
    return found;
}

std::string when(uint64_t t) {
    if (t == 0) return "-";
    const std::time_t tt = static_cast<std::time_t>(t);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&tt));
    return buf;
}

// Printable one-line preview: control bytes escaped, cut to n bytes (UTF-8 safe).
std::string preview(const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < s.size() && out.size() < n; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '\n')
            out += "\\n";
        else if (c < 0x20)
            out += strfmt("\\x%02x", c);
        else
            out += static_cast<char>(c);
    }
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0x80)) out.pop_back();
    return out;
}

std::string mib(uint64_t b) {
    return strfmt("%.1f MiB", static_cast<double>(b) / (1 << 20));
}

int cmd_ls(const std::string& dir, const std::string& model) {
    uint64_t total = 0;
    int bad = 0, foreign = 0;
    kvstore::model_identity id;
    if (!model.empty()) id = kvstore::identity_of_model(resolve_model_path(model));
    std::printf("%-12s %8s %5s %-10s %8s %11s  %-16s  %-16s  %s\n", "name", "tokens", "hits",
                "reason", "ctx", "size", "last used", "model", "key text");
    for (const std::string& p : kv_paths(dir)) {
        kvstore::file_info fi;
        const status st = kvstore::inspect_file(p, &fi);
        if (!st.ok()) {
            std::printf("%-12s INVALID: %s\n", p.substr(p.size() - 43, 12).c_str(),
                        st.message().c_str());
            ++bad;
            continue;
        }
        std::string text;
        if (const status kt = kvstore::read_key_text(p, &text); !kt.ok())
            text = "(" + kt.message() + ")";
        total += fi.file_size;
        std::string fp = strfmt("%016llx", static_cast<unsigned long long>(fi.fingerprint));
        if (!model.empty() && fi.fingerprint != id.fingerprint) {
            fp = "other " + fp.substr(0, 10);
            ++foreign;
        }
        std::printf("%-12s %8u %5u %-10s %8u %11s  %-16s  %-16s  %s\n",
                    fi.name.substr(0, 12).c_str(), fi.header.tokens, fi.header.hits,
                    kvstore::reason_name(fi.header.reason), fi.header.ctx,
                    mib(fi.file_size).c_str(), when(fi.header.last_used).c_str(), fp.c_str(),
                    preview(text, 48).c_str());
    }
    std::printf("total: %s\n", mib(total).c_str());
    if (foreign > 0)
        std::printf("%d entries written for another model (this model: %016llx)\n", foreign,
                    static_cast<unsigned long long>(id.fingerprint));
    return bad ? 1 : 0;
}

int cmd_show(const std::string& dir, const std::string& what, bool full) {
    const std::string p = resolve_entry(dir, what);
    kvstore::file_info fi;
    status st = kvstore::inspect_file(p, &fi);
    if (!st.ok()) throw Error(st.message());
    std::string text;
    if (const status kt = kvstore::read_key_text(p, &text); !kt.ok())
        text = "(" + kt.message() + ")";
    const kvstore::kv_header& h = fi.header;
    std::printf("file:         %s\n", p.c_str());
    std::printf("version:      %u\n", h.version);
    std::printf("quant bits:   %u\n", h.quant_bits);
    std::printf("reason:       %s\n", kvstore::reason_name(h.reason));
    std::printf("flags:        %s%s%s%s\n", h.ext & kvstore::k_ext_tool_map ? "tool-map " : "",
                h.ext & kvstore::k_ext_responses_key ? "responses-key " : "",
                h.ext & kvstore::k_ext_thinking_key ? "thinking-key " : "",
                h.ext & kvstore::k_ext_integrity ? "integrity" : "");
    std::printf("tokens:       %u\n", h.tokens);
    std::printf("hits:         %u\n", h.hits);
    std::printf("context:      %u\n", h.ctx);
    std::printf("created:      %s\n", when(h.created).c_str());
    std::printf("last used:    %s\n", when(h.last_used).c_str());
    std::printf("payload:      %llu bytes\n", static_cast<unsigned long long>(h.payload_bytes));
    std::printf("file:         %llu bytes\n", static_cast<unsigned long long>(fi.file_size));
    std::printf("model:        %016llx\n", static_cast<unsigned long long>(fi.fingerprint));
    std::printf("key text:     %zu bytes\n", text.size());
    std::printf("%s\n", full ? text.c_str()
                             : (preview(text, 400) + (text.size() > 400 ? " ..." : "")).c_str());
    return 0;
}

int cmd_verify(const std::string& where, const std::string& model) {
    std::unique_ptr<Engine> engine;
    kvstore::model_identity id;
    if (!model.empty()) {
        engine_options eo;
        eo.model_path = resolve_model_path(model);
        const status st = Engine::load(eo, &engine);
        if (!st.ok()) throw Error(st.message());
        id = kvstore::identity_of_model(eo.model_path);
    }
    int bad = 0, good = 0, foreign = 0;
    for (const std::string& p : kv_paths(where)) {
        kvstore::file_info fi;
        status st = kvstore::verify_file(p, &fi);
        if (st.ok() && engine && fi.fingerprint != id.fingerprint) {
            ++foreign;  // intact, but another model's: a store of this model leaves it alone
            std::printf("other   %s (%u tokens, written for another model: %016llx)\n", p.c_str(),
                        fi.header.tokens, static_cast<unsigned long long>(fi.fingerprint));
            continue;
        }
        if (st.ok() && engine) {
            session_options so;
            so.n_ctx = std::max<int64_t>(fi.header.ctx, fi.header.tokens + 1);
            so.checkpoint_interval = 0;
            std::unique_ptr<Session> s;
            st = engine->create_session(so, &s);
            if (st.ok()) st = kvstore::load_file(p, *s, id);
        }
        if (st.ok()) {
            ++good;
            std::printf("ok      %s (%u tokens)\n", p.c_str(), fi.header.tokens);
        } else {
            ++bad;
            std::printf("BAD     %s\n", st.message().c_str());
        }
    }
    std::printf("%d ok, %d bad%s\n", good, bad, engine ? " (payloads loaded into the model)" : "");
    if (foreign > 0) std::printf("%d of another model (not loaded)\n", foreign);
    return bad ? 1 : 0;
}

int cmd_rm(const std::string& dir, const std::vector<std::string>& names, bool all) {
    std::vector<std::string> paths;
    if (all) {
        paths = kv_paths(dir);
    } else {
        if (names.empty()) throw Error("kv rm: name files (SHA-1 prefixes) or give --all");
        for (const std::string& n : names) paths.push_back(resolve_entry(dir, n));
    }
    for (const std::string& p : paths) {
        if (::unlink(p.c_str()) != 0) throw Error("kv rm: cannot remove " + p);
        std::printf("removed %s\n", p.c_str());
    }
    return 0;
}

struct args {
    std::string dir;
    std::string name;
    std::vector<std::string> names;
    std::string model;
    bool full = false;
    bool all = false;
};

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.require_subcommand(1);
    CLI::App* ls = sub.add_subcommand("ls", "List the files of a cache directory");
    ls->add_option("dir", a->dir, "Cache directory")->required();
    ls->add_option("-m,--model", a->model,
                   "Model GGUF: mark the entries written for another model");
    CLI::App* show = sub.add_subcommand("show", "Print one file's header and key text");
    show->add_option("dir", a->dir, "Cache directory (or the file itself)")->required();
    show->add_option("name", a->name, "SHA-1 name or a unique prefix of it");
    show->add_flag("--full", a->full, "Print the whole key text");
    CLI::App* verify = sub.add_subcommand(
        "verify", "Check every file (layout, name, checksum); with -m also load each payload");
    verify->add_option("dir", a->dir, "Cache directory or one file")->required();
    verify->add_option("-m,--model", a->model, "Model GGUF to load the payloads into");
    CLI::App* rm = sub.add_subcommand("rm", "Remove files");
    rm->add_option("dir", a->dir, "Cache directory")->required();
    rm->add_option("names", a->names, "SHA-1 names or unique prefixes");
    rm->add_flag("--all", a->all, "Remove every cache file of the directory");
    sub.footer(
        "Exit status 1 when ls or verify finds an invalid file (a file of another model "
        "is not invalid).");
    return [a, ls, show, verify, rm]() {
        if (ls->parsed()) return cmd_ls(a->dir, a->model);
        if (show->parsed()) return cmd_show(a->dir, a->name, a->full);
        if (verify->parsed()) return cmd_verify(a->dir, a->model);
        if (rm->parsed()) return cmd_rm(a->dir, a->names, a->all);
        return 2;
    };
}

}  // namespace

MAGNETAR_COMMAND(kv, "kv", "Inspect a disk KV cache directory (ls, show, verify, rm)", setup);

}  // namespace magnetar::cli
