// The CPU matmul entry of every weight type against its scalar twin (cpu/ref/matmul_ref.h),
// and the batching contract: a token's outputs are bit-identical whatever the batch it is
// computed in and whatever the thread count.
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref/matmul_ref.h"
#include "core/rng.h"
#include "quant/random_fill.h"

namespace magnetar {
namespace {

struct weights {
    std::vector<uint8_t> bytes;
    tensor t;
};

weights random_weights(ggml_type type, int64_t n_in, int64_t n_out, uint64_t seed) {
    weights w;
    const size_t rb = row_bytes(type, n_in);
    w.bytes.resize(rb * static_cast<size_t>(n_out));
    Rng rng(seed);
    for (int64_t r = 0; r < n_out; ++r)
        fill_random_row(type, rng, 0.5f, w.bytes.data() + r * rb, n_in);
    w.t = make_tensor(w.bytes.data(), type, n_in, n_out);
    return w;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i])) return 1e30;
        num += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return num / den;
}

TEST(CpuMatmul, EveryWeightTypeMatchesScalarTwin) {
    const int64_t n_in = 512, n_out = 37, n_tok = 5;
    std::vector<float> x(n_in * n_tok);
    Rng rng(3);
    for (auto& v : x) v = rng.normal();
    backend::cpu_backend be(2, false, /*exact=*/true);
    backend::limits l;
    l.max_row = n_in;
    be.reserve(l);
    for (ggml_type type : {ggml_type::F32, ggml_type::F16, ggml_type::BF16, ggml_type::Q8_0,
                           ggml_type::Q2_K, ggml_type::Q4_K, ggml_type::IQ2_XXS}) {
        SCOPED_TRACE(type_traits_of(type).name);
        weights w = random_weights(type, n_in, n_out, 11);
        const tensor xt = make_tensor(x.data(), ggml_type::F32, n_in, n_tok);
        std::vector<float> fast(n_out * n_tok), ref(n_out * n_tok), scratch(n_in);
        be.matmul(w.t, xt, make_tensor(fast.data(), ggml_type::F32, n_out, n_tok));
        cpu::ref::matmul_ref(w.t, xt, make_tensor(ref.data(), ggml_type::F32, n_out, n_tok), 0,
                             n_out, scratch.data());
        const double e = nmse(fast, ref);
        std::printf("  %-8s fast vs scalar twin nmse %.3e\n", type_traits_of(type).name, e);
        EXPECT_LE(e, 1e-12);

        // Token 3 alone, and with one thread: the same bits as inside the batch of five.
        std::vector<float> one(n_out);
        be.matmul(w.t, make_tensor(x.data() + 3 * n_in, ggml_type::F32, n_in, 1),
                  make_tensor(one.data(), ggml_type::F32, n_out, 1));
        backend::cpu_backend be1(1, false, /*exact=*/true);
        be1.reserve(l);
        std::vector<float> single(n_out * n_tok);
        be1.matmul(w.t, xt, make_tensor(single.data(), ggml_type::F32, n_out, n_tok));
        for (int64_t o = 0; o < n_out; ++o) {
            EXPECT_EQ(one[o], fast[3 * n_out + o]);
        }
        EXPECT_EQ(single, fast);
    }
}

// The default path for quantized weights: int8 activations (Q8_0 / Q8_K). Close to the float
// twin (the activation rounding of Gaussian rows costs about 1e-4 in nmse), and still
// independent of the batch and the thread count.
TEST(CpuMatmul, Int8ActivationPathIsCloseAndBatchInvariant) {
    const int64_t n_in = 512, n_out = 37, n_tok = 5;
    std::vector<float> x(n_in * n_tok);
    Rng rng(5);
    for (auto& v : x) v = rng.normal();
    backend::cpu_backend be(2), be1(1);
    backend::limits l;
    l.max_row = n_in;
    be.reserve(l);
    be1.reserve(l);
    for (ggml_type type : {ggml_type::Q8_0, ggml_type::Q2_K, ggml_type::Q4_K, ggml_type::IQ2_XXS}) {
        SCOPED_TRACE(type_traits_of(type).name);
        weights w = random_weights(type, n_in, n_out, 13);
        const tensor xt = make_tensor(x.data(), ggml_type::F32, n_in, n_tok);
        std::vector<float> fast(n_out * n_tok), ref(n_out * n_tok), scratch(n_in);
        be.matmul(w.t, xt, make_tensor(fast.data(), ggml_type::F32, n_out, n_tok));
        cpu::ref::matmul_ref(w.t, xt, make_tensor(ref.data(), ggml_type::F32, n_out, n_tok), 0,
                             n_out, scratch.data());
        const double e = nmse(fast, ref);
        std::printf("  %-8s int8 activations vs float twin nmse %.3e\n", type_traits_of(type).name,
                    e);
        EXPECT_LE(e, 5e-4);
        std::vector<float> one(n_out), single(n_out * n_tok);
        be.matmul(w.t, make_tensor(x.data() + 2 * n_in, ggml_type::F32, n_in, 1),
                  make_tensor(one.data(), ggml_type::F32, n_out, 1));
        be1.matmul(w.t, xt, make_tensor(single.data(), ggml_type::F32, n_out, n_tok));
        for (int64_t o = 0; o < n_out; ++o) EXPECT_EQ(one[o], fast[2 * n_out + o]);
        EXPECT_EQ(single, fast);
    }
}

}  // namespace
}  // namespace magnetar
