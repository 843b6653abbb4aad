// The model generator: deterministic bytes, the published weight mix, the real vocabulary, and
// every preset loads through the same validation as real files.
#include "gen-model/gen_model.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "gen-model/vocab.h"
#include "model/model.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

std::string generate(const std::string& preset, genmodel::weight_scheme ws, uint64_t seed) {
    const std::string path = test::temp_dir() + "/" + preset + ".gguf";
    genmodel::options o;
    o.preset = preset;
    o.weights = ws;
    o.seed = seed;
    o.output = path;
    o.quiet = true;
    genmodel::generate(o);
    return path;
}

uint64_t file_hash(const std::string& path) {
    auto bytes = test::read_file(path);
    return fnv1a64(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

const std::string& tiny_f32() {
    static const std::string path = generate("tiny", genmodel::weight_scheme::f32, 7);
    return path;
}

TEST(GenModel, TinyLoadsWithRealVocabulary) {
    auto m = model::load(tiny_f32());
    const hparams& hp = m->hp();
    EXPECT_EQ(hp.n_layer, 6u);
    EXPECT_EQ(hp.n_hash_layer, 2u);
    EXPECT_EQ(hp.n_vocab, 129280u);
    EXPECT_EQ((std::vector<uint32_t>(hp.compress_ratios.begin(), hp.compress_ratios.begin() + 6)),
              (std::vector<uint32_t>{0, 0, 4, 128, 4, 128}));
    const gguf::value* toks = m->file().find("tokenizer.ggml.tokens");
    ASSERT_NE(toks, nullptr);
    ASSERT_EQ(toks->arr.size(), 129280u);
    EXPECT_EQ(toks->arr[0].s,
              "<\xef\xbd\x9c"
              "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    EXPECT_EQ(toks->arr[1].s,
              "<\xef\xbd\x9c"
              "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    EXPECT_EQ(toks->arr[128803].s, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
    EXPECT_EQ(toks->arr[128804].s,
              "<\xef\xbd\x9c"
              "Assistant\xef\xbd\x9c>");
    EXPECT_EQ(toks->arr[128821].s, "<think>");
    EXPECT_EQ(toks->arr[128822].s, "</think>");
    EXPECT_EQ(toks->arr[128825].s,
              "\xef\xbd\x9c"
              "DSML\xef\xbd\x9c");
    const gguf::value* merges = m->file().find("tokenizer.ggml.merges");
    ASSERT_NE(merges, nullptr);
    EXPECT_GT(merges->arr.size(), 100000u);
    EXPECT_EQ(m->file().find("tokenizer.ggml.model")->s, "gpt2");
    EXPECT_EQ(m->file().find("tokenizer.ggml.bos_token_id")->u, 0u);
    EXPECT_EQ(m->file().find("tokenizer.ggml.eos_token_id")->u, 1u);
    // Every tensor is F32 except the hash tables.
    for (const auto& t : m->file().tensors()) {
        const bool hash = t.name.find("tid2eid") != std::string::npos;
        EXPECT_EQ(t.type, hash ? ggml_type::I32 : ggml_type::F32) << t.name;
    }
}

// The metadata llama.cpp's DeepSeek V4 loader needs, as the published files carry it:
// context_length as u32, one SwiGLU clamp per block (not block_count + 1), the sqrt(softplus)
// gating function; the engine reads the file back with the MTP block's clamp from the last one.
TEST(GenModel, MetadataIsWhatLlamaCppLoads) {
    auto m = model::load(tiny_f32());
    const gguf::value* ctx = m->file().find("deepseek4.context_length");
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(ctx->type, gguf::value_type::u32);
    const gguf::value* clamp = m->file().find("deepseek4.swiglu_clamp_exp");
    ASSERT_NE(clamp, nullptr);
    EXPECT_EQ(clamp->arr.size(), m->hp().n_layer);
    const gguf::value* gating = m->file().find("deepseek4.expert_gating_func");
    ASSERT_NE(gating, nullptr);
    EXPECT_EQ(gating->type, gguf::value_type::u32);
    EXPECT_EQ(gating->u, 4u);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SQRTSOFTPLUS
    const gguf::value* ratios = m->file().find("deepseek4.attention.compress_ratios");
    ASSERT_NE(ratios, nullptr);
    EXPECT_EQ(ratios->arr.size(), m->hp().n_layer + 1u);  // with the MTP entry, as published
}

TEST(GenModel, SameSeedSameBytesOtherSeedOtherBytes) {
    const std::string again = generate("tiny", genmodel::weight_scheme::f32, 7);
    const std::string a_copy = again + ".a";
    std::filesystem::rename(again, a_copy);
    EXPECT_EQ(file_hash(tiny_f32()), file_hash(a_copy));
    const std::string other = generate("tiny", genmodel::weight_scheme::f32, 8);
    EXPECT_NE(file_hash(tiny_f32()), file_hash(other));
}

TEST(GenModel, PublishedMixFollowsSpec) {
    const std::string path = generate("tiny-mtp", genmodel::weight_scheme::published, 3);
    auto m = model::load(path);
    ASSERT_TRUE(m->weights().mtp.has_value());
    const auto& w = m->weights();
    EXPECT_EQ(w.token_embd.type, ggml_type::F16);
    EXPECT_EQ(w.output.type, ggml_type::Q8_0);
    EXPECT_EQ(w.output_hc_fn.type, ggml_type::F16);
    EXPECT_EQ(w.output_norm.type, ggml_type::F32);
    for (const auto& l : w.layers) {
        EXPECT_EQ(l.ffn_gate_exps.type, ggml_type::IQ2_XXS);
        EXPECT_EQ(l.ffn_up_exps.type, ggml_type::IQ2_XXS);
        EXPECT_EQ(l.ffn_down_exps.type, ggml_type::Q2_K);
        EXPECT_EQ(l.attn_q_a.type, ggml_type::Q8_0);
        EXPECT_EQ(l.attn_q_b.type, ggml_type::Q8_0);
        EXPECT_EQ(l.attn_kv.type, ggml_type::Q8_0);
        EXPECT_EQ(l.attn_output_a.type, ggml_type::Q8_0);
        EXPECT_EQ(l.attn_output_b.type, ggml_type::Q8_0);
        EXPECT_EQ(l.ffn_gate_shexp.type, ggml_type::Q8_0);
        EXPECT_EQ(l.ffn_down_shexp.type, ggml_type::Q8_0);
        EXPECT_EQ(l.hc_attn_fn.type, ggml_type::F16);
        EXPECT_EQ(l.ffn_gate_inp.type, ggml_type::F16);
        EXPECT_EQ(l.attn_norm.type, ggml_type::F32);
        EXPECT_EQ(l.attn_sinks.type, ggml_type::F32);
        EXPECT_EQ(l.hc_attn_base.type, ggml_type::F32);
        if (l.compress_ratio != 0) {
            EXPECT_EQ(l.comp_kv.type, ggml_type::F16);
            EXPECT_EQ(l.comp_ape.type, ggml_type::F16);
        }
        if (l.compress_ratio == 4) {
            EXPECT_EQ(l.idx_q_b.type, ggml_type::F16);
            EXPECT_EQ(l.idx_proj.type, ggml_type::F16);
        }
        if (l.hash_routed)
            EXPECT_EQ(l.ffn_gate_tid2eid.type, ggml_type::I32);
        else
            EXPECT_EQ(l.exp_probs_b.type, ggml_type::F32);
    }
    // The published MTP file keeps its experts in Q4_K.
    EXPECT_EQ(w.mtp->block.ffn_gate_exps.type, ggml_type::Q4_K);
    EXPECT_EQ(w.mtp->block.ffn_down_exps.type, ggml_type::Q4_K);
    EXPECT_EQ(w.mtp->e_proj.type, ggml_type::Q8_0);
}

TEST(GenModel, HashTablesHoldDistinctValidExperts) {
    auto m = model::load(tiny_f32());
    const hparams& hp = m->hp();
    const weight& t = m->weights().layers[0].ffn_gate_tid2eid;
    ASSERT_TRUE(t);
    ASSERT_EQ(t.ne[0], hp.n_expert_used);
    for (int64_t tok = 0; tok < t.ne[1]; tok += 997) {
        const auto* row = reinterpret_cast<const int32_t*>(t.data) + tok * t.ne[0];
        for (int64_t i = 0; i < t.ne[0]; ++i) {
            EXPECT_GE(row[i], 0);
            EXPECT_LT(row[i], static_cast<int32_t>(hp.n_expert));
            for (int64_t j = 0; j < i; ++j) EXPECT_NE(row[i], row[j]) << "token " << tok;
        }
    }
}

TEST(GenModel, BadOptionsGiveClearErrors) {
    genmodel::options o;
    o.preset = "huge";
    o.output = test::temp_dir() + "/x.gguf";
    try {
        genmodel::generate(o);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown preset 'huge'"), std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.output));
    EXPECT_THROW(genmodel::parse_weight_scheme("q3"), Error);
    o.preset = "flash-layers:0";
    EXPECT_THROW(genmodel::generate(o), Error);
    o.preset = "v41-tiny";
    o.mtp = true;
    try {
        genmodel::generate(o);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--mtp adds a DeepSeek V4 MTP block"),
                  std::string::npos)
            << e.what();
    }
}

// --mtp adds the MTP block to a preset without one: the tensors of tiny-mtp under the tiny name.
TEST(GenModel, MtpOptionAddsTheBlock) {
    genmodel::options o;
    o.preset = "tiny";
    o.mtp = true;
    o.seed = 3;
    o.output = test::temp_dir() + "/tiny-plus-mtp.gguf";
    o.quiet = true;
    genmodel::generate(o);
    auto m = model::load(o.output);
    EXPECT_TRUE(m->weights().mtp.has_value());
    EXPECT_FALSE(model::load(tiny_f32())->weights().mtp.has_value());
    auto ref = model::load(generate("tiny-mtp", genmodel::weight_scheme::f32, 3));
    ASSERT_EQ(m->file().tensors().size(), ref->file().tensors().size());
    for (size_t i = 0; i < ref->file().tensors().size(); ++i)
        EXPECT_EQ(m->file().tensors()[i].name, ref->file().tensors()[i].name);
}

// --sliding-window changes the raw attention window and nothing else: same tensors, the flag in
// general.generator; a window the loader would refuse is refused before writing.
TEST(GenModel, SlidingWindowOptionSetsTheWindowOnly) {
    genmodel::options o;
    o.preset = "tiny";
    o.seed = 7;
    o.sliding_window = 64;
    o.output = test::temp_dir() + "/tiny-window-64.gguf";
    o.quiet = true;
    genmodel::generate(o);
    auto m = model::load(o.output);
    auto ref = model::load(tiny_f32());
    EXPECT_EQ(ref->hp().n_swa, 16u);
    EXPECT_EQ(m->hp().n_swa, 64u);
    ASSERT_EQ(m->file().tensors().size(), ref->file().tensors().size());
    for (size_t i = 0; i < ref->file().tensors().size(); ++i) {
        EXPECT_EQ(m->file().tensors()[i].name, ref->file().tensors()[i].name);
        for (int d = 0; d < 4; ++d)
            EXPECT_EQ(m->file().tensors()[i].ne[d], ref->file().tensors()[i].ne[d]);
    }
    const gguf::value* gen = m->file().find("general.generator");
    ASSERT_NE(gen, nullptr);
    EXPECT_EQ(gen->s, "magnetar gen-model --preset tiny --seed 7 --sliding-window 64");

    o.sliding_window = 1u << 30;
    o.output = test::temp_dir() + "/tiny-window-huge.gguf";
    try {
        genmodel::generate(o);
        FAIL();
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("--sliding-window 1073741824 does not fit preset 'tiny'"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("attention.sliding_window"), std::string::npos) << what;
    }
    EXPECT_FALSE(std::filesystem::exists(o.output));
}

}  // namespace
}  // namespace magnetar
