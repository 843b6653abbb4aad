// Fixtures of the forward-pass tests: the tiny test models, the token sequence, float64
// reference runs (tests/reference/ref.py) and engine runs through the public API, plus the
// comparison metrics. Models and reference outputs are cached on disk (support/fixture_cache.h)
// because ctest starts every test case as its own process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "magnetar/session.h"

namespace magnetar::test {

// Model seed and token-sequence seed of the reference comparisons. The comparison with the
// float64 reference is exact up to float32 rounding only while no model-defined rounding step
// (FP8 / FP4 round trip) or top-k choice falls within float32 noise of its decision boundary;
// with these seeds none does (see docs/engine.md, "Comparing with the reference").
constexpr uint64_t kModelSeed = 1;
constexpr uint64_t kTokenSeed = 12;
constexpr int kSeqLen = 320;  // crosses 2 ratio-128 blocks, 80 ratio-4 blocks, the window and top-k

// A generated model (preset "tiny" / "tiny-mtp", weights "f32" / "published"), cached.
const std::string& tiny_model(const std::string& preset, const std::string& weights);

// BOS followed by n - 1 ids drawn from the whole vocabulary with Rng(seed).
std::vector<int32_t> test_tokens(uint64_t seed, int n, uint32_t n_vocab = 129280);

// Runs the reference once per (model bytes, reference sources, tokens, args) and returns the
// folder holding logits.f32 (and whatever args ask for: '@DIR@' in args is replaced by the
// folder, e.g. "--mtp-out @DIR@/mtp.f32").
std::string reference_run(const std::string& name, const std::string& model,
                          const std::vector<int32_t>& tokens, const std::string& args);

struct engine_run {
    int64_t chunk = 2048;  // prefill chunk size (ignored when decode)
    bool decode = false;   // one eval() per token
    bool all_positions = true;
    bool mtp = false;  // MTP draft logits
    int threads = 2;
    // Float activations for quantized weights (engine_options::exact_matmul): the path that
    // matches the reference exactly up to float32 rounding.
    bool exact = true;
    std::vector<std::string> dumps;  // names to tap
    dump_fn dump;
};

struct engine_out {
    std::vector<float> logits;  // [rows, n_vocab]
    std::vector<float> mtp;     // [n - 1, n_vocab]
};

engine_out run_engine(const std::string& model, const std::vector<int32_t>& tokens,
                      const engine_run& r);

struct diff_stats {
    double nmse = 0;         // sum (a - b)^2 / sum b^2 (infinity with NaN or a shape mismatch)
    double max_abs = 0;      // largest |a - b|
    double max_rel = 0;      // largest |a - b| / max |b| of its row (logits near 0 make per-element
                             // ratios meaningless)
    int64_t worst_row = -1;  // row of max_abs
    int64_t argmax_mismatch = 0;  // rows whose arg-max differs
    bool bit_identical = false;
};

diff_stats compare_rows(const std::vector<float>& got, const std::vector<float>& ref,
                        int64_t width);

}  // namespace magnetar::test
