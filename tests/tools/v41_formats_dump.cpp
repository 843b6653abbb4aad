// Writes the engine's V4.1 numerics for given inputs, for the independent numpy / torch check
// in tests/reference/v41_formats_check.py (which generates the inputs, runs this program and
// compares). Not a user tool: raw little-endian files in, raw files out.
//
//   v41_formats_dump formats IN.f32 OUT.bin
//       IN: n floats (bf16 values), n a multiple of 512. OUT, in order:
//       FP8/32 qdq f32[n], codes u8[n], exps u8[n/32];
//       FP4-E4M3/16 qdq f32[n], codes u8[n], scales u8[n/16];
//       MXFP4/32 qdq f32[n], codes u8[n], exps u8[n/32];
//       window rows (512) u8[n/512*528], main KV rows (512) u8[n/512*288],
//       index key rows (128) u8[n/128*68], GGML block_mxfp4 u8[n/32*17].
//   v41_formats_dump rope N_ROT THETA ORIG FACTOR BETA_FAST BETA_SLOW IN.f32 OUT.bin
//       IN: rows of N_ROT floats, row r rotated at position r*r*37 (forward). OUT: inv_freq
//       f32[N_ROT/2], then the rotated rows. ORIG = 0: no YaRN.
//   v41_formats_dump engram VOCAB MAX_NGRAM N_HEAD CVOCAB PAD MULTS HIST.i64 OUT.i64
//       MULTS: comma-separated multipliers, [layer][MAX_NGRAM] (the layer count follows).
//       HIST: compressed ids (-1 = dead). OUT: primes i64[L*C], offsets i64[L*C], then the
//       row indices i64[len(HIST)][L][C].
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/rope41.h"
#include "model/engram_hash.h"
#include "quant/fp8fp4.h"

namespace {

using namespace magnetar;

std::vector<char> read_file(const char* path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(std::string("cannot open ") + path);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

template <typename T>
std::vector<T> read_array(const char* path) {
    const auto bytes = read_file(path);
    if (bytes.size() % sizeof(T) != 0) throw std::runtime_error(std::string("bad size: ") + path);
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

struct writer {
    std::ofstream f;
    explicit writer(const char* path) : f(path, std::ios::binary) {
        if (!f) throw std::runtime_error(std::string("cannot create ") + path);
    }
    template <typename T>
    void put(const std::vector<T>& v) {
        f.write(reinterpret_cast<const char*>(v.data()),
                static_cast<std::streamsize>(v.size() * sizeof(T)));
    }
};

int run_formats(const char* in, const char* out) {
    const auto x = read_array<float>(in);
    const int64_t n = static_cast<int64_t>(x.size());
    if (n == 0 || n % 512 != 0)
        throw std::runtime_error("formats: count must be a multiple of 512");
    writer w(out);
    std::vector<float> q(x.size());
    std::vector<uint8_t> codes(x.size()), sc32(x.size() / 32), sc16(x.size() / 16);
    quant::qdq_fp8_block32(x.data(), q.data(), n, codes.data(), sc32.data());
    w.put(q), w.put(codes), w.put(sc32);
    quant::qdq_fp4_e4m3_block16(x.data(), q.data(), n, codes.data(), sc16.data());
    w.put(q), w.put(codes), w.put(sc16);
    quant::qdq_mxfp4_block32(x.data(), q.data(), n, codes.data(), sc32.data());
    w.put(q), w.put(codes), w.put(sc32);
    std::vector<uint8_t> rows(static_cast<size_t>(n / 512 * 528));
    for (int64_t r = 0; r < n / 512; ++r)
        quant::quantize_window_row(x.data() + r * 512, 512, rows.data() + r * 528, nullptr);
    w.put(rows);
    rows.assign(static_cast<size_t>(n / 512 * 288), 0);
    for (int64_t r = 0; r < n / 512; ++r)
        quant::quantize_main_kv_row(x.data() + r * 512, 512, rows.data() + r * 288, nullptr);
    w.put(rows);
    rows.assign(static_cast<size_t>(n / 128 * 68), 0);
    for (int64_t r = 0; r < n / 128; ++r)
        quant::quantize_index_key_row(x.data() + r * 128, 128, rows.data() + r * 68, nullptr);
    w.put(rows);
    std::vector<block_mxfp4> blocks(static_cast<size_t>(n / 32));
    quant::quantize_row_mxfp4(x.data(), blocks.data(), n);
    rows.assign(blocks.size() * sizeof(block_mxfp4), 0);
    std::memcpy(rows.data(), blocks.data(), rows.size());
    w.put(rows);
    return 0;
}

int run_rope(char** a) {
    const int n_rot = std::stoi(a[0]);
    rope41::yarn_params y;
    y.orig_ctx = std::stoull(a[2]);
    y.factor = std::stof(a[3]);
    y.beta_fast = std::stof(a[4]);
    y.beta_slow = std::stof(a[5]);
    const auto inv = rope41::inv_freq(n_rot, std::stod(a[1]), &y);
    auto x = read_array<float>(a[6]);
    if (x.size() % static_cast<size_t>(n_rot) != 0)
        throw std::runtime_error("rope: bad input size");
    for (size_t r = 0; r < x.size() / static_cast<size_t>(n_rot); ++r) {
        const int64_t pos = static_cast<int64_t>(r * r * 37);
        rope41::apply(x.data() + r * static_cast<size_t>(n_rot), n_rot, pos, inv.data(), false);
    }
    writer w(a[7]);
    w.put(inv), w.put(x);
    return 0;
}

int run_engram(char** a) {
    const int64_t vocab = std::stoll(a[0]);
    const int max_ngram = std::stoi(a[1]);
    const int n_head = std::stoi(a[2]);
    const int64_t cv = std::stoll(a[3]);
    const int64_t pad = std::stoll(a[4]);
    std::vector<uint64_t> mults;
    std::stringstream ss(a[5]);
    for (std::string tok; std::getline(ss, tok, ',');) mults.push_back(std::stoull(tok));
    if (mults.empty() || mults.size() % static_cast<size_t>(max_ngram) != 0) {
        throw std::runtime_error("engram: multiplier count must be a multiple of MAX_NGRAM");
    }
    const int n_layers = static_cast<int>(mults.size() / static_cast<size_t>(max_ngram));
    const auto layers = engram::build_layers(vocab, n_layers, max_ngram, n_head, cv, mults, {}, {});
    const auto hist = read_array<int64_t>(a[6]);
    const int64_t n_col = static_cast<int64_t>(max_ngram - 1) * n_head;
    std::vector<int64_t> out(hist.size() * static_cast<size_t>(n_layers * n_col));
    engram::hash_positions(layers, max_ngram, n_head, cv, pad, hist.data(), 0,
                           static_cast<int64_t>(hist.size()), 0, static_cast<int64_t>(hist.size()),
                           out.data());
    writer w(a[7]);
    for (const auto& L : layers) w.put(L.primes);
    for (const auto& L : layers) w.put(L.offsets);
    w.put(out);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "formats" && argc == 4) return run_formats(argv[2], argv[3]);
        if (cmd == "rope" && argc == 10) return run_rope(argv + 2);
        if (cmd == "engram" && argc == 10) return run_engram(argv + 2);
        std::fprintf(
            stderr,
            "usage: v41_formats_dump formats IN OUT | rope ... | engram ... (see the source)\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "v41_formats_dump: %s\n", e.what());
        return 1;
    }
}
