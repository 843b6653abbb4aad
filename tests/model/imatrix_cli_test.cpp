// `magnetar imatrix` on the tiny MTP model: every routed expert tensor gets per-expert counts
// equal to the token rows routed to it (cross-checked against the moe_sel tap), dense entries
// equal independently computed sums of squares of their tapped input, the moe_swiglu tap is the
// SwiGLU output the down experts multiply, and `magnetar quantize --imatrix` takes the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "forward_fixtures.h"
#include "magnetar/engine.h"
#include "model/model.h"
#include "quantize/imatrix.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

constexpr int kChunk = 24;
constexpr int kMaxChunks = 3;

const char* kText =
    "The quick brown fox jumps over the lazy dog. Importance matrices weigh each column of a "
    "weight by the mean square of the activations it multiplies, so that quantization spends "
    "its precision where the inputs are large.\n\nA second paragraph: experts that see many "
    "tokens matter more; experts that see none keep uniform importance. Numbers 12345 and "
    "symbols (*&^%) help the tokenizer. The end of the calibration text is near, but a few more "
    "words keep the chunks full.\n";

struct fixture {
    std::string model;
    std::string prompts;
    std::string out;
    std::string log;
    int rc = -1;
};

// Runs the command once per process.
const fixture& run_once() {
    static const fixture f = [] {
        fixture r;
        r.model = test::tiny_model("tiny-mtp", "f32");
        r.prompts = test::temp_dir() + "/calib.txt";
        const std::string text = kText;
        test::write_file(r.prompts, std::vector<uint8_t>(text.begin(), text.end()));
        r.out = test::temp_dir() + "/tiny.imatrix.gguf";
        r.rc = test::run_command(test::magnetar_bin() + " imatrix -q -t 2 -m " + r.model + " -f " +
                                     r.prompts + " -o " + r.out + " --chunk " +
                                     std::to_string(kChunk) + " --max-chunks " +
                                     std::to_string(kMaxChunks),
                                 &r.log);
        return r;
    }();
    return f;
}

// The chunks the command evaluates: BOS, then consecutive kChunk - 1 text tokens.
std::vector<std::vector<int32_t>> chunks_of(const Engine& e) {
    std::vector<int32_t> ids;
    EXPECT_TRUE(e.tokenize(kText, false, &ids).ok());
    const int32_t bos = e.info().special.bos;
    EXPECT_GE(bos, 0);
    const size_t body = kChunk - 1;
    EXPECT_GE(ids.size(), body * kMaxChunks) << "the text must fill the chunks";
    std::vector<std::vector<int32_t>> out;
    for (size_t c = 0; c < static_cast<size_t>(kMaxChunks); ++c) {
        out.push_back({bos});
        out.back().insert(out.back().end(), ids.begin() + c * body, ids.begin() + (c + 1) * body);
    }
    return out;
}

// Evaluates the chunks from empty sessions and hands every tapped row block to fn.
void tap_chunks(const std::string& model, const std::vector<std::string>& names,
                const dump_fn& fn) {
    engine_options eo;
    eo.model_path = model;
    eo.n_threads = 2;
    std::unique_ptr<Engine> engine;
    ASSERT_TRUE(Engine::load(eo, &engine).ok());
    session_options so;
    so.n_ctx = kChunk;
    so.chunk_size = kChunk;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(engine->create_session(so, &s).ok());
    s->set_dump(names, fn);
    for (const auto& c : chunks_of(*engine)) {
        s->reset();
        ASSERT_TRUE(s->eval(c).ok());
    }
}

TEST(ImatrixCli, ExpertCountsMatchTheRouting) {
    const fixture& f = run_once();
    ASSERT_EQ(f.rc, 0) << f.log;
    const imatrix::data d = imatrix::read(f.out);
    EXPECT_EQ(d.chunk_count, static_cast<uint32_t>(kMaxChunks));
    EXPECT_EQ(d.chunk_size, static_cast<uint32_t>(kChunk));
    ASSERT_EQ(d.datasets.size(), 1u);

    // Rows routed to each expert, per layer prefix, from the moe_sel tap.
    std::map<std::string, std::vector<int64_t>> routed;
    int64_t main_rows = 0;
    tap_chunks(
        f.model, {"blk.*.moe_sel", "mtp.moe_sel"},
        [&](const std::string& name, int64_t, int64_t n_rows, int64_t width, const float* data) {
            const std::string layer = name.substr(0, name.size() - 7);  // "blk.3." / "mtp."
            auto& c = routed[layer == "mtp." ? "mtp.0." : layer];
            c.resize(8, 0);
            for (int64_t i = 0; i < n_rows * width; ++i) ++c[static_cast<size_t>(data[i])];
            if (layer == "blk.0.") main_rows += n_rows;
        });
    EXPECT_EQ(main_rows, kChunk * kMaxChunks);
    ASSERT_EQ(routed.size(), 7u) << "6 layers and the MTP block";
    for (const auto& [prefix, counts] : routed) {
        for (const char* w :
             {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
            const std::string name = prefix + w;
            const auto it = d.entries.find(name);
            ASSERT_NE(it, d.entries.end()) << name;
            EXPECT_EQ(it->second.n_mat, 8) << name;
            EXPECT_EQ(it->second.n_per_row, 256) << name;
            EXPECT_EQ(it->second.counts, counts) << name;
        }
        // gate and up share their input rows.
        EXPECT_EQ(d.entries.at(prefix + "ffn_gate_exps.weight").in_sum2,
                  d.entries.at(prefix + "ffn_up_exps.weight").in_sum2);
    }
}

TEST(ImatrixCli, DenseSumsEqualTheTappedInputs) {
    const fixture& f = run_once();
    ASSERT_EQ(f.rc, 0) << f.log;
    const imatrix::data d = imatrix::read(f.out);

    std::map<std::string, std::vector<double>> sums;
    std::map<std::string, int64_t> rows;
    tap_chunks(
        f.model, {"blk.0.attn_norm", "blk.2.q_lora", "mtp.ffn_norm", "result_norm"},
        [&](const std::string& name, int64_t, int64_t n_rows, int64_t width, const float* data) {
            auto& s = sums[name];
            s.resize(static_cast<size_t>(width), 0.0);
            for (int64_t t = 0; t < n_rows; ++t) {
                for (int64_t j = 0; j < width; ++j) {
                    const double x = data[t * width + j];
                    s[static_cast<size_t>(j)] += x * x;
                }
            }
            rows[name] += n_rows;
        });
    const std::map<std::string, std::string> input_of = {
        {"blk.0.attn_q_a.weight", "blk.0.attn_norm"},
        {"blk.0.attn_kv.weight", "blk.0.attn_norm"},
        {"blk.2.attn_q_b.weight", "blk.2.q_lora"},
        {"blk.2.indexer.attn_q_b.weight", "blk.2.q_lora"},
        {"mtp.0.ffn_up_shexp.weight", "mtp.ffn_norm"},
        {"output.weight", "result_norm"},
    };
    for (const auto& [weight, tap] : input_of) {
        const auto it = d.entries.find(weight);
        ASSERT_NE(it, d.entries.end()) << weight;
        const imatrix::entry& e = it->second;
        ASSERT_EQ(e.n_mat, 1) << weight;
        EXPECT_EQ(e.counts[0], rows.at(tap)) << weight;
        const std::vector<double>& want = sums.at(tap);
        ASSERT_EQ(e.in_sum2.size(), want.size()) << weight;
        for (size_t j = 0; j < want.size(); ++j)
            EXPECT_NEAR(e.in_sum2[j], want[j], 1e-6 * want[j] + 1e-30) << weight << " col " << j;
    }
    EXPECT_EQ(rows.at("mtp.ffn_norm"), (kChunk - 1) * kMaxChunks) << "MTP rows: n - 1 per chunk";

    // Every matmul weight of the model has an entry (the MTP projections e_proj / h_proj and
    // the embedding are not matmuls over tapped inputs).
    auto m = model::load(f.model);
    const int64_t n_tokens = kChunk * kMaxChunks;
    for (const auto& t : m->file().tensors()) {
        const std::string& n = t.name;
        const bool matrix =
            t.n_dims >= 2 && t.type != ggml_type::I32 && n.find("hc_") == std::string::npos &&
            n.find("_ape.") == std::string::npos && n != "token_embd.weight" &&
            n.find("e_proj") == std::string::npos && n.find("h_proj") == std::string::npos;
        if (!matrix) continue;
        const auto it = d.entries.find(n);
        ASSERT_NE(it, d.entries.end()) << n;
        EXPECT_EQ(it->second.n_per_row, t.ne[0]) << n;
    }
    // wo_a sees every token once per output group.
    EXPECT_EQ(d.entries.at("blk.1.attn_output_a.weight").counts[0], n_tokens * 2);
    EXPECT_EQ(d.entries.at("blk.1.attn_output_b.weight").counts[0], n_tokens);
}

float swiglu(float g, float u, float c) {
    const float gc = std::min(g, c);
    const float uc = std::clamp(u, -c, c);
    return gc / (1.0f + std::exp(-gc)) * uc;
}

// moe_swiglu is the SwiGLU output of each selected expert, before the routing weight, and
// tapping it does not change the logits.
TEST(ImatrixCli, MoeSwigluTapIsTheDownInput) {
    const std::string& model = test::tiny_model("tiny-mtp", "f32");
    auto m = model::load(model);
    const uint32_t il = 3;
    const layer_weights& lw = m->weights().layers[il];
    const int64_t D = lw.ffn_gate_exps.ne[0], F = lw.ffn_gate_exps.ne[1];
    const float clamp = m->hp().swiglu_clamp[il];
    std::vector<float> x, sel, act;
    int64_t k = 0;
    const std::string p = "blk." + std::to_string(il) + ".";
    tap_chunks(
        model, {p + "ffn_norm", p + "moe_sel", p + "moe_swiglu"},
        [&](const std::string& name, int64_t, int64_t n_rows, int64_t width, const float* data) {
            auto& dst = name == p + "ffn_norm" ? x : name == p + "moe_sel" ? sel : act;
            if (name == p + "moe_sel") k = width;
            dst.insert(dst.end(), data, data + n_rows * width);
        });
    ASSERT_GT(k, 0);
    const int64_t n = static_cast<int64_t>(x.size()) / D;
    ASSERT_EQ(static_cast<int64_t>(act.size()), n * k * F);
    const auto* gate = reinterpret_cast<const float*>(lw.ffn_gate_exps.data);
    const auto* up = reinterpret_cast<const float*>(lw.ffn_up_exps.data);
    double err = 0, ref = 0;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < k; ++i) {
            const auto e = static_cast<int64_t>(sel[static_cast<size_t>(t * k + i)]);
            for (int64_t o = 0; o < F; ++o) {
                double g = 0, u = 0;
                for (int64_t j = 0; j < D; ++j) {
                    g += double(gate[(e * F + o) * D + j]) * x[static_cast<size_t>(t * D + j)];
                    u += double(up[(e * F + o) * D + j]) * x[static_cast<size_t>(t * D + j)];
                }
                const double want = swiglu(static_cast<float>(g), static_cast<float>(u), clamp);
                const double got = act[static_cast<size_t>((t * k + i) * F + o)];
                err += (got - want) * (got - want);
                ref += want * want;
            }
        }
    }
    EXPECT_GT(ref, 0);
    EXPECT_LT(err / ref, 1e-10);

    // Logits with and without the tap are bit-identical.
    auto logits = [&](bool tapped) {
        engine_options eo;
        eo.model_path = model;
        eo.n_threads = 2;
        std::unique_ptr<Engine> engine;
        EXPECT_TRUE(Engine::load(eo, &engine).ok());
        session_options so;
        so.n_ctx = kChunk;
        std::unique_ptr<Session> s;
        EXPECT_TRUE(engine->create_session(so, &s).ok());
        if (tapped) s->set_dump({"blk.*.moe_swiglu"}, [](auto&&...) {});
        EXPECT_TRUE(s->eval(chunks_of(*engine)[0]).ok());
        const auto l = s->logits();
        return std::vector<float>(l.begin(), l.end());
    };
    EXPECT_EQ(logits(true), logits(false));
}

// The quantizer takes the file (its names are the model's weight names) and its importance
// changes the IQ2_XXS / Q2_K codes.
TEST(ImatrixCli, QuantizeAcceptsTheFile) {
    const fixture& f = run_once();
    ASSERT_EQ(f.rc, 0) << f.log;
    const std::string plain = test::temp_dir() + "/q2-plain.gguf";
    const std::string weighted = test::temp_dir() + "/q2-imatrix.gguf";
    std::string log;
    // Scheme q2 on layer 0's experts only (the others keep F32), which keeps the test quick.
    const std::string q2 =
        " quantize -t 2 --scheme q2 --keep 'blk.[1-9].*_exps.weight' --keep "
        "'mtp.*_exps.weight' ";
    ASSERT_EQ(test::run_command(test::magnetar_bin() + q2 + "-q " + f.model + " " + plain, &log), 0)
        << log;
    ASSERT_EQ(test::run_command(
                  test::magnetar_bin() + q2 + "--imatrix " + f.out + " " + f.model + " " + weighted,
                  &log),
              0)
        << log;
    EXPECT_EQ(log.find("name no tensor"), std::string::npos) << log;
    EXPECT_EQ(log.find("without importance"), std::string::npos) << log;
    auto a = model::load(plain);
    auto b = model::load(weighted);
    const auto bytes = [](const weight& w) {
        return std::vector<uint8_t>(w.data, w.data + w.n_bytes());
    };
    const layer_weights& la = a->weights().layers[0];
    const layer_weights& lb = b->weights().layers[0];
    EXPECT_EQ(lb.ffn_gate_exps.type, ggml_type::IQ2_XXS);
    EXPECT_EQ(lb.ffn_down_exps.type, ggml_type::Q2_K);
    EXPECT_NE(bytes(la.ffn_gate_exps), bytes(lb.ffn_gate_exps));
    EXPECT_NE(bytes(la.ffn_up_exps), bytes(lb.ffn_up_exps));
    EXPECT_NE(bytes(la.ffn_down_exps), bytes(lb.ffn_down_exps));
}

TEST(ImatrixCli, MergeOfTwoRunsAddsCounts) {
    const fixture& f = run_once();
    ASSERT_EQ(f.rc, 0) << f.log;
    const std::string merged = test::temp_dir() + "/merged.gguf";
    std::string log;
    ASSERT_EQ(test::run_command(test::magnetar_bin() + " imatrix -q --merge " + f.out + " " +
                                    f.out + " -o " + merged,
                                &log),
              0)
        << log;
    const imatrix::data one = imatrix::read(f.out);
    const imatrix::data two = imatrix::read(merged);
    ASSERT_EQ(one.entries.size(), two.entries.size());
    EXPECT_EQ(two.chunk_count, 2 * one.chunk_count);
    for (const auto& [name, e] : one.entries) {
        const imatrix::entry& m = two.entries.at(name);
        for (size_t i = 0; i < e.counts.size(); ++i)
            EXPECT_EQ(m.counts[i], 2 * e.counts[i]) << name;
        // Doubling is exact in float.
        for (size_t i = 0; i < e.in_sum2.size(); ++i)
            EXPECT_EQ(m.in_sum2[i], 2 * e.in_sum2[i]) << name;
    }
}

}  // namespace
}  // namespace magnetar
