// DeepSeek V4.1 (`deepseek41`) tensor catalogue and binding (spec v41.md §2.3), the generator's
// storage profiles (§6.1) and the per-token KV bytes (§5.4). Roles, validation and keys are in
// v41_model_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gen-model/gen_model.h"
#include "gguf/gguf.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stats.h"
#include "model/v41_model_fixture.h"
#include "quant/fp16.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using test::v41_builder;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

std::string load_error(const v41_builder& b, const load_options& lo = {}) {
    const std::string path = test::temp_dir() + "/v41_bad.gguf";
    b.write(path);
    try {
        model::load(path, lo);
    } catch (const Error& e) {
        return e.what();
    }
    return "(loaded without error)";
}

std::string generate(genmodel::weight_scheme ws, uint64_t seed = 5) {
    const std::string path = test::temp_dir() + "/v41-tiny-" +
                             std::to_string(static_cast<int>(ws)) + "-" + std::to_string(seed) +
                             ".gguf";
    genmodel::options o;
    o.preset = "v41-tiny";
    o.weights = ws;
    o.seed = seed;
    o.output = path;
    o.quiet = true;
    genmodel::generate(o);
    return path;
}

// Whether v is exactly an E4M3 value (finite, |v| <= 448).
bool is_e4m3(float v) {
    const float a = std::fabs(v);
    if (a == 0.0f) return true;
    if (a > 448.0f) return false;
    if (a < 0x1p-6f) {  // subnormal grid 2^-9
        const float m = a * 512.0f;
        return m == std::floor(m);
    }
    int k = 0;
    std::frexp(a, &k);                           // a in [2^(k-1), 2^k)
    const float q = std::ldexp(a, 3 - (k - 1));  // 3 mantissa bits
    return q == std::floor(q);
}

std::vector<float> dequantize(const weight& w) {
    const uint64_t n = static_cast<uint64_t>(w.info->n_elements());
    std::vector<float> out(n);
    if (w.type == ggml_type::F32) {
        std::memcpy(out.data(), w.data, n * 4);
    } else {
        const to_float_fn to_float = to_float_of(w.type);
        EXPECT_NE(to_float, nullptr);
        if (to_float) to_float(w.data, out.data(), static_cast<int64_t>(n));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Catalogue and binding
// ---------------------------------------------------------------------------------------------

TEST(V41Catalogue, TensorsFollowLayerRoles) {
    const hparams hp = preset_v41_tiny();
    const auto specs = tensor_catalogue(hp, true);
    auto has = [&](const std::string& name) {
        for (const auto& s : specs) {
            if (s.name == name) return true;
        }
        return false;
    };
    auto shape = [&](const std::string& name) {
        for (const auto& s : specs) {
            if (s.name == name) return s.ne;
        }
        return std::vector<int64_t>{};
    };
    for (uint32_t il = 0; il < 8; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        EXPECT_EQ(has(p + "attn_compressor_kv.weight"), hp.is_kv_source(il)) << il;
        EXPECT_EQ(has(p + "attn_compressor_gate.weight"),
                  hp.is_kv_source(il) && hp.compress_ratio(il) == 2)
            << il;
        EXPECT_EQ(has(p + "indexer.attn_k.weight"), hp.is_kv_source(il)) << il;
        EXPECT_EQ(has(p + "indexer.attn_q_b.weight"), hp.is_index_source(il)) << il;
        EXPECT_EQ(has(p + "engram_embd.weight"), il < 2) << il;
        EXPECT_FALSE(has(p + "attn_compressor_ape.weight"));
        EXPECT_TRUE(has(p + "exp_probs_b_vl.bias"));
    }
    EXPECT_FALSE(has("output_hc_fn.weight"));
    EXPECT_FALSE(has("blk.8.hc_head_fn.weight"));
    // §6.1 shapes (GGUF order is [in, out]).
    EXPECT_EQ(shape("blk.0.engram_embd.weight"), (std::vector<int64_t>{33, 660}));
    EXPECT_EQ(shape("blk.1.engram_embd.weight"), (std::vector<int64_t>{33, 864}));
    EXPECT_EQ(shape("blk.1.engram_kv.weight"), (std::vector<int64_t>{192, 1280}));
    EXPECT_EQ(shape("blk.1.engram_q_norm.weight"), (std::vector<int64_t>{256, 4}));
    EXPECT_EQ(shape("blk.2.attn_output_a.weight"), (std::vector<int64_t>{128, 128}));
    EXPECT_EQ(shape("blk.3.indexer.attn_k.weight"), (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(shape("blk.6.indexer.proj.weight"), (std::vector<int64_t>{256, 4}));
    EXPECT_EQ(shape("blk.5.ffn_down_exps.weight"), (std::vector<int64_t>{128, 256, 8}));
    EXPECT_EQ(shape("blk.8.ffn_gate_exps.weight"), (std::vector<int64_t>{256, 128, 4}));
    EXPECT_EQ(shape("blk.8.dspark_main_proj.weight"), (std::vector<int64_t>{768, 256}));
    EXPECT_EQ(shape("blk.9.dspark_markov_head.weight"), (std::vector<int64_t>{32, 512}));
    EXPECT_EQ(shape("blk.9.dspark_conf.weight"), (std::vector<int64_t>{288, 1}));
    EXPECT_FALSE(has("blk.9.dspark_main_proj.weight"));
    EXPECT_FALSE(has("blk.8.dspark_conf.weight"));
    // The released shape: one Engram table of 384006168 rows of 264 bytes.
    const hparams rel = preset_v41_flash();
    bool found = false;
    for (const auto& s : tensor_catalogue(rel, true)) {
        if (s.name == "blk.1.engram_embd.weight") {
            EXPECT_EQ(s.ne, (std::vector<int64_t>{264, 384006168}));
            found = true;
        }
    }
    EXPECT_TRUE(found);
}

TEST(V41Catalogue, ValidFileBindsEveryRole) {
    v41_builder b;
    const std::string path = test::temp_dir() + "/v41_ok.gguf";
    b.write(path);
    auto m = model::load(path);
    const hparams& hp = m->hp();
    ASSERT_TRUE(m->weights().v41.has_value());
    const v41_weights& w = *m->weights().v41;
    EXPECT_TRUE(m->weights().layers.empty());
    ASSERT_EQ(w.layers.size(), 8u);
    ASSERT_EQ(w.dspark.size(), 2u);
    EXPECT_TRUE(m->has_draft());
    for (const auto& l : w.layers) {
        EXPECT_TRUE(l.attn_q_a && l.attn_kv && l.attn_output_b && l.ffn_gate_exps &&
                    l.ffn_down_shexp);
        EXPECT_EQ(l.mode, hp.mode(l.il));
        EXPECT_EQ(static_cast<bool>(l.comp_kv), hp.is_kv_source(l.il)) << l.il;
        EXPECT_EQ(static_cast<bool>(l.comp_gate), hp.is_kv_source(l.il) && l.compress_ratio == 2)
            << l.il;
        EXPECT_EQ(static_cast<bool>(l.idx_k), hp.owns_index_k(l.il)) << l.il;
        EXPECT_EQ(static_cast<bool>(l.idx_q_b), hp.is_index_source(l.il)) << l.il;
        EXPECT_EQ(static_cast<bool>(l.engram_embd), l.engram_index >= 0) << l.il;
        EXPECT_TRUE(l.exp_probs_b && l.exp_probs_b_vl);
    }
    EXPECT_TRUE(w.dspark[0].dspark_main_proj && w.dspark[0].dspark_main_norm);
    EXPECT_FALSE(w.dspark[0].dspark_conf);
    EXPECT_TRUE(w.dspark[1].dspark_norm && w.dspark[1].dspark_markov_embd &&
                w.dspark[1].dspark_markov_head && w.dspark[1].dspark_conf);
    EXPECT_EQ(w.dspark[1].ffn_gate_inp.ne[1], 4);
    EXPECT_TRUE(m->unknown_tensors().empty());
    const size_stats st = compute_size_stats(*m);
    EXPECT_GT(st.mtp_bytes, 0u);
    EXPECT_GT(st.bytes_by_role.at(tensor_role::engram), 0u);
}

TEST(V41Catalogue, AliasesAndAlternativeTypesAreAccepted) {
    v41_builder b;
    b.edit_tensor = [](tensor_spec& s, ggml_type& t) {
        if (s.name == "blk.0.engram_kv.weight") s.name = "blk.0.engram_wkv.weight";
        if (s.name == "blk.1.engram_q_norm.weight") s.name = "blk.1.engram_q.weight";
        if (s.name == "blk.8.dspark_main_proj.weight") s.name = "fc.weight";
        if (s.name == "blk.8.dspark_main_norm.weight") s.name = "enc.output_norm.weight";
        if (s.name == "blk.1.engram_embd.weight") {  // vcruz305: lossy Q8_0 table [ED, rows]
            t = ggml_type::Q8_0;
            s.ne = {32, 864};
        }
        if (s.name == "blk.2.ffn_gate_exps.weight" || s.name == "blk.2.ffn_up_exps.weight")
            t = ggml_type::IQ2_XXS;
        if (s.name == "blk.2.attn_q_a.weight") t = ggml_type::Q8_0;
        if (s.dtype == dtype_class::norm_f32_bf16) t = ggml_type::BF16;
        return true;
    };
    const std::string path = test::temp_dir() + "/v41_alias.gguf";
    b.write(path);
    auto m = model::load(path);
    const v41_weights& w = *m->weights().v41;
    EXPECT_EQ(w.layers[0].engram_kv.info->name, "blk.0.engram_wkv.weight");
    EXPECT_EQ(w.layers[1].engram_q_norm.info->name, "blk.1.engram_q.weight");
    EXPECT_EQ(w.dspark[0].dspark_main_proj.info->name, "fc.weight");
    EXPECT_EQ(w.layers[1].engram_embd.type, ggml_type::Q8_0);
    EXPECT_EQ(w.layers[2].ffn_gate_exps.type, ggml_type::IQ2_XXS);
    EXPECT_TRUE(m->unknown_tensors().empty());
}

TEST(V41Catalogue, BadFilesGiveClearErrors) {
    v41_builder b;
    b.edit_tensor = [](tensor_spec& s, ggml_type&) {
        return s.name != "blk.3.indexer.attn_k.weight";
    };
    std::string m = load_error(b);
    EXPECT_CONTAINS(m, "'blk.3.indexer.attn_k.weight' is missing");
    b.edit_tensor = [](tensor_spec& s, ggml_type&) { return s.name != "blk.0.engram_kv.weight"; };
    m = load_error(b);
    EXPECT_CONTAINS(
        m, "'blk.0.engram_kv.weight' is missing (nor its alias 'blk.0.engram_wkv.weight')");
    b.edit_tensor = [](tensor_spec& s, ggml_type&) {
        if (s.name == "blk.6.indexer.attn_q_b.weight") s.ne = {64, 128};
        return true;
    };
    m = load_error(b);
    EXPECT_CONTAINS(
        m, "'blk.6.indexer.attn_q_b.weight': wrong shape: expected [64, 256], got [64, 128]");
    b.edit_tensor = [](tensor_spec& s, ggml_type&) {
        if (s.name == "blk.0.engram_embd.weight") s.ne = {33, 661};
        return true;
    };
    m = load_error(b);
    EXPECT_CONTAINS(m,
                    "'blk.0.engram_embd.weight': wrong shape: expected [33, 660], got [33, 661]");
    b.edit_tensor = [](tensor_spec& s, ggml_type& t) {
        if (s.name == "blk.4.attn_q_a.weight") t = ggml_type::MXFP4;
        return true;
    };
    m = load_error(b);
    EXPECT_CONTAINS(m, "'blk.4.attn_q_a.weight': type mxfp4 not allowed here");
    b.edit_tensor = [](tensor_spec& s, ggml_type& t) {
        if (s.name == "blk.5.ffn_up_exps.weight") t = ggml_type::Q4_K;
        return true;
    };
    EXPECT_CONTAINS(load_error(b),
                    "layer 5: ffn_gate_exps (mxfp4) and ffn_up_exps (q4_K) must share one type");
    b.edit_tensor = [](tensor_spec& s, ggml_type&) { return s.name != "blk.9.dspark_conf.weight"; };
    EXPECT_CONTAINS(load_error(b), "'blk.9.dspark_conf.weight' is missing");
    b.edit_tensor = nullptr;
    b.edit_metadata = [](gguf::writer& w) {
        w.set("tokenizer.ggml.tokens", gguf::value::make_string_array({"a"}));
    };
    EXPECT_CONTAINS(load_error(b), "(deepseek41.vocab_size)");
    b.edit_metadata = nullptr;
    load_options lo;
    lo.mtp_path = "/nonexistent.gguf";
    EXPECT_CONTAINS(load_error(b, lo), "separate MTP / DSpark file is not supported");
    // Without DSpark tensors the file loads without a draft, unless one is required.
    b.with_dspark = false;
    const std::string path = test::temp_dir() + "/v41_nodspark.gguf";
    b.write(path);
    auto m2 = model::load(path);
    EXPECT_FALSE(m2->has_draft());
    lo.mtp_path.clear();
    lo.require_mtp = true;
    EXPECT_CONTAINS(load_error(b, lo), "no DSpark stages");
}

// ---------------------------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------------------------

struct generated {
    std::string path;
    std::unique_ptr<model> m;
};

const generated& tiny(genmodel::weight_scheme ws) {
    static std::map<int, generated> cache;
    auto it = cache.find(static_cast<int>(ws));
    if (it == cache.end()) {
        generated g;
        g.path = generate(ws);
        g.m = model::load(g.path);
        it = cache.emplace(static_cast<int>(ws), std::move(g)).first;
    }
    return it->second;
}

TEST(V41GenModel, EverySchemeLoadsAndBinds) {
    for (auto ws : {genmodel::weight_scheme::f32, genmodel::weight_scheme::lossless,
                    genmodel::weight_scheme::published, genmodel::weight_scheme::published_q4}) {
        const model& m = *tiny(ws).m;
        ASSERT_TRUE(m.weights().v41.has_value());
        EXPECT_EQ(m.weights().v41->dspark.size(), 2u);
        EXPECT_TRUE(m.unknown_tensors().empty());
        EXPECT_EQ(m.file().find("tokenizer.ggml.tokens"), nullptr);  // vocabulary 512: no tokenizer
        EXPECT_EQ(m.hp().v41.engram.token_map, preset_v41_tiny().v41.engram.token_map);
        // Engram tables are row264-style I8 in every scheme.
        EXPECT_EQ(m.weights().v41->layers[0].engram_embd.type, ggml_type::I8);
    }
}

TEST(V41GenModel, StorageTypesPerScheme) {
    const v41_weights& f = *tiny(genmodel::weight_scheme::f32).m->weights().v41;
    const v41_weights& l = *tiny(genmodel::weight_scheme::lossless).m->weights().v41;
    const v41_weights& p = *tiny(genmodel::weight_scheme::published).m->weights().v41;
    const model& lm = *tiny(genmodel::weight_scheme::lossless).m;
    const model& pm = *tiny(genmodel::weight_scheme::published).m;
    EXPECT_EQ(f.layers[3].attn_q_b.type, ggml_type::F32);
    EXPECT_EQ(f.layers[3].ffn_gate_exps.type, ggml_type::F32);
    EXPECT_EQ(l.layers[3].attn_q_b.type, ggml_type::BF16);
    EXPECT_EQ(l.layers[3].ffn_gate_exps.type, ggml_type::MXFP4);
    EXPECT_EQ(l.layers[3].ffn_down_exps.type, ggml_type::MXFP4);
    EXPECT_EQ(l.layers[3].attn_norm.type, ggml_type::F32);
    EXPECT_EQ(l.layers[3].hc_attn_fn.type, ggml_type::F32);
    EXPECT_EQ(l.layers[3].ffn_gate_inp.type, ggml_type::BF16);
    EXPECT_EQ(l.layers[3].comp_gate.type, ggml_type::BF16);
    EXPECT_EQ(l.layers[0].engram_kv.type, ggml_type::BF16);
    EXPECT_EQ(l.layers[0].engram_q_norm.type, ggml_type::F32);
    EXPECT_EQ(lm.weights().token_embd.type, ggml_type::BF16);
    EXPECT_EQ(p.layers[3].attn_q_b.type, ggml_type::Q8_0);
    EXPECT_EQ(p.layers[3].ffn_gate_shexp.type, ggml_type::Q8_0);
    EXPECT_EQ(p.layers[3].ffn_gate_exps.type, ggml_type::IQ2_XXS);
    EXPECT_EQ(p.layers[3].ffn_up_exps.type, ggml_type::IQ2_XXS);
    EXPECT_EQ(p.layers[3].ffn_down_exps.type, ggml_type::MXFP4);  // F = 128: no whole Q2_K block
    EXPECT_EQ(p.layers[3].attn_norm.type, ggml_type::F32);
    EXPECT_EQ(pm.weights().token_embd.type, ggml_type::BF16);
    EXPECT_EQ(pm.weights().output.type, ggml_type::BF16);
    EXPECT_EQ(pm.file().find("general.quantization_version")->u, 2u);
    // lossless is the default for V4.1 presets.
    EXPECT_EQ(genmodel::parse_weight_scheme("auto"), genmodel::weight_scheme::preset_default);
    genmodel::options o;
    o.preset = "v41-tiny";
    o.seed = 5;
    o.quiet = true;
    o.output = test::temp_dir() + "/v41-default.gguf";
    genmodel::generate(o);
    EXPECT_EQ(test::read_file(o.output),
              test::read_file(tiny(genmodel::weight_scheme::lossless).path));
}

TEST(V41GenModel, F32IsTheExactDequantizationOfLossless) {
    const model& fm = *tiny(genmodel::weight_scheme::f32).m;
    const model& lm = *tiny(genmodel::weight_scheme::lossless).m;
    ASSERT_EQ(fm.file().tensors().size(), lm.file().tensors().size());
    for (const auto& t : lm.file().tensors()) {
        const gguf::tensor_info* ft = fm.file().find_tensor(t.name);
        ASSERT_NE(ft, nullptr) << t.name;
        weight lw, fw;
        lw.info = &t;
        lw.data = lm.file().tensor_data(t);
        lw.type = t.type;
        fw.info = ft;
        fw.data = fm.file().tensor_data(*ft);
        fw.type = ft->type;
        if (t.type == ggml_type::I8) {
            ASSERT_EQ(ft->type, ggml_type::I8);
            EXPECT_EQ(std::memcmp(lw.data, fw.data, t.n_bytes), 0) << t.name;
            continue;
        }
        ASSERT_EQ(ft->type, ggml_type::F32) << t.name;
        const std::vector<float> a = dequantize(lw);
        const std::vector<float> b = dequantize(fw);
        ASSERT_EQ(a.size(), b.size());
        size_t bad = 0;
        for (size_t i = 0; i < a.size(); ++i) bad += a[i] == b[i] ? 0 : 1;
        EXPECT_EQ(bad, 0u) << t.name;
    }
}

TEST(V41GenModel, LosslessWeightsAreCheckpointFormats) {
    const model& lm = *tiny(genmodel::weight_scheme::lossless).m;
    const v41_weights& w = *lm.weights().v41;
    // FP8 matrices: each 32x32 tile is E4M3 codes times one power of two.
    auto check_tiles = [](const weight& wt) {
        const std::vector<float> v = dequantize(wt);
        const int64_t cols = wt.ne[0];
        const int64_t rows = static_cast<int64_t>(v.size()) / cols;
        size_t bad = 0;
        for (int64_t r0 = 0; r0 < rows; r0 += 32) {
            for (int64_t c0 = 0; c0 < cols; c0 += 32) {
                float amax = 0.0f;
                for (int64_t r = r0; r < std::min(rows, r0 + 32); ++r) {
                    for (int64_t c = c0; c < std::min(cols, c0 + 32); ++c)
                        amax = std::max(amax, std::fabs(v[static_cast<size_t>(r * cols + c)]));
                }
                if (amax == 0.0f) continue;
                const int S = static_cast<int>(std::ceil(std::log2(amax / 448.0f)));
                for (int64_t r = r0; r < std::min(rows, r0 + 32); ++r) {
                    for (int64_t c = c0; c < std::min(cols, c0 + 32); ++c) {
                        bad +=
                            is_e4m3(std::ldexp(v[static_cast<size_t>(r * cols + c)], -S)) ? 0 : 1;
                    }
                }
            }
        }
        return bad;
    };
    for (const auto& l : w.layers) {
        EXPECT_EQ(check_tiles(l.attn_q_a), 0u) << l.il;
        EXPECT_EQ(check_tiles(l.attn_output_a), 0u) << l.il;
        EXPECT_EQ(check_tiles(l.ffn_down_shexp), 0u) << l.il;
        if (l.engram_kv) {
            EXPECT_EQ(check_tiles(l.engram_kv), 0u) << l.il;
        }
        // And not all zero: the weights carry the fan_in^-1/2 scale.
        const std::vector<float> q = dequantize(l.attn_q_a);
        double ss = 0;
        for (float x : q) ss += static_cast<double>(x) * x;
        const double rms = std::sqrt(ss / static_cast<double>(q.size()));
        EXPECT_NEAR(rms, 1.0 / 16.0, 0.01) << l.il;
    }
    EXPECT_EQ(check_tiles(w.dspark[0].dspark_main_proj), 0u);
    // BF16 and F32 norms hold bf16 values with the measured means.
    const std::vector<float> an = dequantize(w.layers[2].attn_norm);
    double mean = 0;
    for (float x : an) {
        EXPECT_EQ(bf16_to_f32(f32_to_bf16(x)), x);
        mean += x;
    }
    EXPECT_NEAR(mean / static_cast<double>(an.size()), 0.025, 0.003);
    // Embedding RMS 0.12.
    const std::vector<float> e = dequantize(lm.weights().token_embd);
    double ss = 0;
    for (float x : e) ss += static_cast<double>(x) * x;
    EXPECT_NEAR(std::sqrt(ss / static_cast<double>(e.size())), 0.12, 0.01);
    // Engram rows: ED E4M3 bytes then ED/32 UE8M0 scale bytes (no NaN codes, sane exponents).
    const weight& t = w.layers[1].engram_embd;
    ASSERT_EQ(t.ne[0], 33);
    for (int64_t r = 0; r < t.ne[1]; ++r) {
        const uint8_t* row = t.data + r * 33;
        for (int j = 0; j < 32; ++j) EXPECT_NE(row[j] & 0x7f, 0x7f);
        EXPECT_GT(row[32], 100);
        EXPECT_LT(row[32], 127);
    }
}

TEST(V41GenModel, SameSeedSameBytes) {
    const std::string first = generate(genmodel::weight_scheme::lossless, 5);
    const std::string other = generate(genmodel::weight_scheme::lossless, 6);
    EXPECT_NE(test::read_file(first), test::read_file(other));
    genmodel::options o;
    o.preset = "v41-tiny";
    o.weights = genmodel::weight_scheme::lossless;
    o.seed = 6;
    o.quiet = true;
    o.output = test::temp_dir() + "/v41-again.gguf";
    genmodel::generate(o);
    EXPECT_EQ(test::read_file(o.output), test::read_file(other));
}

TEST(V41GenModel, BadOptions) {
    genmodel::options o;
    o.preset = "v41-flash";
    o.quiet = true;
    o.output = test::temp_dir() + "/v41-flash.gguf";
    try {
        genmodel::generate(o);
        FAIL() << "v41-flash generated";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), "token map");
    }
    o.preset = "tiny";
    o.weights = genmodel::weight_scheme::lossless;
    EXPECT_THROW(genmodel::generate(o), Error);
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

TEST(V41Memory, PerTokenKvBytes) {
    const hparams rel = preset_v41_flash();
    const v41_kv_per_token k = v41_kv_bytes_per_token(rel);
    EXPECT_EQ(k.main_entry_bytes, 288u);
    EXPECT_EQ(k.index_entry_bytes, 68u);
    EXPECT_DOUBLE_EQ(k.entries, 2.5);
    EXPECT_DOUBLE_EQ(k.total(), 890.0);
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(rel), 890.0);
    const kv_memory m = estimate_kv_memory(rel, 1024, 4, true);
    EXPECT_EQ(m.growing_bytes, 890u * 1024u);
    EXPECT_EQ(m.raw_window_bytes, 43u * 128u * 528u);  // 2,906,112 B (§5.4)
    EXPECT_EQ(m.frontier_bytes, 3u * 8192u);           // 8 KiB per ratio-2 source
    const hparams t = preset_v41_tiny();
    const v41_kv_per_token kt = v41_kv_bytes_per_token(t);
    EXPECT_EQ(kt.main_entry_bytes, 36u);   // 64/2 + 64/16
    EXPECT_EQ(kt.index_entry_bytes, 34u);  // 64/2 + 64/32
    EXPECT_DOUBLE_EQ(kt.entries, 2.0);     // sources 1 (r 2), 3 (r 2), 4 (r 1)
    EXPECT_DOUBLE_EQ(kt.total(), 140.0);
    EXPECT_EQ(estimate_kv_memory(t, 256, 4, true).raw_window_bytes, 10u * 8u * 66u);
}

}  // namespace
}  // namespace magnetar
