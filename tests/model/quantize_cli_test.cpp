// `magnetar quantize` on a tiny synthetic model: the q2 / q4 / custom schemes write the
// expected types, the result loads through model validation, and the requantized experts
// decode close to the source weights.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gen-model/gen_model.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

const std::string& tiny_f32_model() {
    static const std::string path = [] {
        const std::string p = test::temp_dir() + "/tiny-f32-for-quantize.gguf";
        genmodel::options o;
        o.preset = "tiny";
        o.weights = genmodel::weight_scheme::f32;
        o.seed = 11;
        o.output = p;
        o.quiet = true;
        genmodel::generate(o);
        return p;
    }();
    return path;
}

std::string quantize(const std::string& args, const std::string& out_name) {
    const std::string out = test::temp_dir() + "/" + out_name;
    std::string log;
    const int rc = test::run_command(
        test::magnetar_bin() + " quantize -q " + tiny_f32_model() + " " + out + " " + args, &log);
    EXPECT_EQ(rc, 0) << log;
    return out;
}

// Relative RMS difference between a weight's values and the same weight in the source model.
double rel_rms(const weight& a, const weight& b) {
    const int64_t n = a.ne[0], rows = a.ne[1] * a.ne[2];
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; ++r) {
        to_float_of(a.type)(a.data + r * a.row_bytes(), x.data(), n);
        to_float_of(b.type)(b.data + r * b.row_bytes(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
            den += double(y[i]) * y[i];
        }
    }
    return std::sqrt(num / den);
}

TEST(QuantizeCli, Q2SchemeLoadsWithPublishedExpertTypes) {
    const std::string out = quantize("--scheme q2", "tiny-q2.gguf");
    auto src = model::load(tiny_f32_model());
    auto m = model::load(out);
    for (size_t il = 0; il < m->weights().layers.size(); ++il) {
        const layer_weights& l = m->weights().layers[il];
        EXPECT_EQ(l.ffn_gate_exps.type, ggml_type::IQ2_XXS) << il;
        EXPECT_EQ(l.ffn_up_exps.type, ggml_type::IQ2_XXS) << il;
        EXPECT_EQ(l.ffn_down_exps.type, ggml_type::Q2_K) << il;
        EXPECT_EQ(l.attn_q_a.type, ggml_type::F32) << "unchanged outside the routed experts";
        EXPECT_LT(rel_rms(l.ffn_gate_exps, src->weights().layers[il].ffn_gate_exps), 0.45);
        EXPECT_LT(rel_rms(l.ffn_down_exps, src->weights().layers[il].ffn_down_exps), 0.45);
    }
    EXPECT_EQ(m->file().find("general.quantization_version")->u, 2u);
}

TEST(QuantizeCli, Q4AndCustomRules) {
    const std::string q4 = quantize(
        "--scheme q4 --keep 'blk.1.*_exps.weight=q8_0' --keep 'blk.2.ffn_down_exps.weight'",
        "tiny-q4.gguf");
    auto m = model::load(q4);
    const auto& L = m->weights().layers;
    EXPECT_EQ(L[0].ffn_gate_exps.type, ggml_type::Q4_K);
    EXPECT_EQ(L[0].ffn_down_exps.type, ggml_type::Q4_K);
    EXPECT_EQ(L[1].ffn_up_exps.type, ggml_type::Q8_0);
    EXPECT_EQ(L[2].ffn_down_exps.type, ggml_type::F32);
    EXPECT_EQ(L[2].ffn_gate_exps.type, ggml_type::Q4_K);
    auto src = model::load(tiny_f32_model());
    EXPECT_LT(rel_rms(L[0].ffn_gate_exps, src->weights().layers[0].ffn_gate_exps), 0.12);
}

// Importance data changes the chosen codes; both the legacy .imatrix and the GGUF layout load.
TEST(QuantizeCli, ImportanceMatrixFormats) {
    auto src = model::load(tiny_f32_model());
    const weight& g = src->weights().layers[3].ffn_gate_exps;
    const std::string name = "blk.3.ffn_gate_exps.weight";
    const int64_t n_per_row = g.ne[0], n_mat = g.ne[2];
    std::vector<float> vals(static_cast<size_t>(n_per_row * n_mat));
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = (i % 7 == 0) ? 50.0f : 0.01f;

    // Legacy: count, then name length, name, ncall, nval, values (scaled by ncall).
    std::vector<uint8_t> legacy;
    auto put = [&](const void* p, size_t n) {
        legacy.insert(legacy.end(), static_cast<const uint8_t*>(p),
                      static_cast<const uint8_t*>(p) + n);
    };
    const int32_t one = 1, len = static_cast<int32_t>(name.size()), ncall = 4,
                  nval = static_cast<int32_t>(vals.size());
    put(&one, 4);
    put(&len, 4);
    put(name.data(), name.size());
    put(&ncall, 4);
    put(&nval, 4);
    std::vector<float> scaled = vals;
    for (float& v : scaled) v *= ncall;
    put(scaled.data(), scaled.size() * 4);
    const std::string legacy_path = test::temp_dir() + "/tiny.imatrix";
    test::write_file(legacy_path, legacy);

    // GGUF: NAME.in_sum2 [n_per_row, n_mat] and NAME.counts [1, n_mat].
    const std::string gguf_path = test::temp_dir() + "/tiny-imatrix.gguf";
    {
        gguf::writer w(gguf_path);
        w.add_tensor(name + ".in_sum2", ggml_type::F32, {n_per_row, n_mat});
        w.add_tensor(name + ".counts", ggml_type::F32, {1, n_mat});
        std::vector<float> sums = vals, counts(static_cast<size_t>(n_mat), 3.0f);
        for (float& v : sums) v *= 3.0f;
        w.write_tensor_data(sums.data(), sums.size() * 4);
        w.write_tensor_data(counts.data(), counts.size() * 4);
        w.finish();
    }
    // Only layer 3's gate / up experts change (IQ2_XXS), which keeps the test quick.
    const std::string only3 =
        "--scheme custom --keep 'blk.3.ffn_gate_exps.weight=iq2_xxs' --keep "
        "'blk.3.ffn_up_exps.weight=iq2_xxs'";
    auto plain = model::load(quantize(only3, "tiny-l3-plain.gguf"));
    auto with_legacy =
        model::load(quantize(only3 + " --imatrix " + legacy_path, "tiny-l3-legacy.gguf"));
    auto with_gguf = model::load(quantize(only3 + " --imatrix " + gguf_path, "tiny-l3-gguf.gguf"));
    const auto bytes = [](const weight& w) {
        return std::vector<uint8_t>(w.data, w.data + w.n_bytes());
    };
    const weight& a = plain->weights().layers[3].ffn_gate_exps;
    const weight& b = with_legacy->weights().layers[3].ffn_gate_exps;
    const weight& c = with_gguf->weights().layers[3].ffn_gate_exps;
    EXPECT_NE(bytes(a), bytes(b));
    EXPECT_EQ(bytes(b), bytes(c)) << "same importance, two file formats";
    EXPECT_EQ(bytes(plain->weights().layers[3].ffn_up_exps),
              bytes(with_legacy->weights().layers[3].ffn_up_exps));
}

TEST(QuantizeCli, RejectsInvalidRequests) {
    std::string log;
    const std::string base = test::magnetar_bin() + " quantize -q " + tiny_f32_model() + " " +
                             test::temp_dir() + "/bad.gguf ";
    // A norm (F32-only class) cannot become Q8_0.
    EXPECT_NE(
        test::run_command(base + "--scheme custom --keep 'blk.0.attn_norm.weight=q8_0'", &log), 0);
    EXPECT_NE(log.find("attn_norm"), std::string::npos) << log;
    // Gate and up experts of a layer must share one type.
    EXPECT_NE(test::run_command(base + "--scheme q2 --keep 'blk.0.ffn_up_exps.weight=q4_K'", &log),
              0);
    EXPECT_NE(log.find("gate"), std::string::npos) << log;
    EXPECT_NE(test::run_command(base + "--scheme q3", &log), 0);
}

}  // namespace
}  // namespace magnetar
