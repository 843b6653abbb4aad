// Model catalogue and weight binding: a valid file loads, and each class of defect is rejected
// with a message that names the culprit (tensor or key) and says expected versus found.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/model_file_builder.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using test::model_file_builder;

std::string load_error(const model_file_builder& b, const load_options& lo = {}) {
    const std::string path = test::temp_dir() + "/m.gguf";
    b.write(path);
    try {
        model::load(path, lo);
    } catch (const Error& e) {
        return e.what();
    }
    return "(loaded without error)";
}

TEST(Catalogue, ValidMicroModelLoadsAndBindsEveryTensor) {
    auto b = model_file_builder::micro();
    const std::string path = test::temp_dir() + "/ok.gguf";
    b.write(path);
    auto m = model::load(path);
    const hparams& hp = m->hp();
    EXPECT_EQ(hp.n_layer, 6u);
    EXPECT_EQ(hp.count_layers_with_ratio(4), 2u);
    EXPECT_EQ(hp.count_layers_with_ratio(128), 2u);
    const auto& w = m->weights();
    ASSERT_TRUE(w.token_embd);
    ASSERT_TRUE(w.output);
    for (const auto& l : w.layers) {
        EXPECT_TRUE(l.attn_q_a && l.attn_q_b && l.attn_kv && l.attn_output_a && l.attn_output_b);
        EXPECT_TRUE(l.ffn_gate_exps && l.ffn_up_exps && l.ffn_down_exps && l.ffn_down_shexp);
        EXPECT_EQ(static_cast<bool>(l.comp_kv), l.compress_ratio != 0) << "layer " << l.il;
        EXPECT_EQ(static_cast<bool>(l.idx_q_b), l.compress_ratio == 4) << "layer " << l.il;
        EXPECT_EQ(static_cast<bool>(l.ffn_gate_tid2eid), l.il < 2) << "layer " << l.il;
        EXPECT_EQ(static_cast<bool>(l.exp_probs_b), l.il >= 2) << "layer " << l.il;
    }
    EXPECT_FALSE(w.mtp.has_value());
    EXPECT_TRUE(m->unknown_tensors().empty());
}

TEST(Catalogue, MissingTensorIsNamed) {
    auto b = model_file_builder::micro();
    b.edit_tensor = [](tensor_spec& s, ggml_type&) {
        return s.name != "blk.3.attn_compressor_kv.weight";
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'blk.3.attn_compressor_kv.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(Catalogue, WrongShapeSaysExpectedAndGot) {
    auto b = model_file_builder::micro();
    b.edit_tensor = [](tensor_spec& s, ggml_type&) {
        if (s.name == "blk.2.attn_q_b.weight") s.ne[1] = 256;
        return true;
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'blk.2.attn_q_b.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected [128, 512], got [128, 256]"), std::string::npos) << msg;
}

TEST(Catalogue, WrongDtypeClassIsRejected) {
    auto b = model_file_builder::micro();
    b.edit_tensor = [](tensor_spec& s, ggml_type& t) {
        if (s.name == "blk.1.attn_norm.weight") t = ggml_type::F16;
        return true;
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'blk.1.attn_norm.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("type f16 not allowed"), std::string::npos) << msg;
}

TEST(Catalogue, GateUpTypeMismatchIsRejected) {
    auto b = model_file_builder::micro();
    b.edit_tensor = [](tensor_spec& s, ggml_type& t) {
        if (s.name == "blk.4.ffn_up_exps.weight") t = ggml_type::Q4_K;
        return true;
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("layer 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ffn_up_exps"), std::string::npos) << msg;
}

TEST(Catalogue, CompressRatioListTooShort) {
    auto b = model_file_builder::micro();
    b.hp.compress_ratios = {0, 0, 4};
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("compress_ratios"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block_count = 6 entries (+1 for the MTP block), got 3"), std::string::npos)
        << msg;
}

TEST(Catalogue, CompressRatioValueOutsideSchedule) {
    auto b = model_file_builder::micro();
    b.hp.compress_ratios[2] = 8;
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("compress_ratios"), std::string::npos) << msg;
    EXPECT_NE(msg.find("entry 2"), std::string::npos) << msg;
}

TEST(Catalogue, InconsistentHeadDims) {
    auto b = model_file_builder::micro();
    b.hp.n_value_dim = 64;
    std::string msg = load_error(b);
    EXPECT_NE(msg.find("value_length"), std::string::npos) << msg;

    b = model_file_builder::micro();
    b.hp.n_rot = 32;  // nope = 96, not whole FP8 blocks of 64
    msg = load_error(b);
    EXPECT_NE(msg.find("key_length"), std::string::npos) << msg;

    b = model_file_builder::micro();
    b.hp.n_o_group = 3;  // does not divide 4 heads
    msg = load_error(b);
    EXPECT_NE(msg.find("output_group_count"), std::string::npos) << msg;
}

TEST(Catalogue, MissingKeyIsNamed) {
    auto b = model_file_builder::micro();
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek4.attention.indexer.top_k"));
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'deepseek4.attention.indexer.top_k'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("required key is missing"), std::string::npos) << msg;
}

TEST(Catalogue, WrongArchitectureIsNamed) {
    auto b = model_file_builder::micro();
    b.edit_metadata = [](gguf::writer& w) {
        w.set("general.architecture", gguf::value::make_string("llama"));
    };
    std::string msg = load_error(b);
    EXPECT_NE(msg.find("general.architecture"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected 'deepseek4', got 'llama'"), std::string::npos) << msg;
}

TEST(Catalogue, WrongKeyTypeIsNamed) {
    auto b = model_file_builder::micro();
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek4.block_count", gguf::value::make_i32(6));
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'deepseek4.block_count'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected type u32, got i32"), std::string::npos) << msg;
}

TEST(Catalogue, FloatKeysAcceptIntegerTypes) {
    auto b = model_file_builder::micro();
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek4.rope.freq_base", gguf::value::make_u32(10000));
        w.set("deepseek4.expert_weights_scale", gguf::value::make_f64(1.5));
    };
    const std::string path = test::temp_dir() + "/f.gguf";
    b.write(path);
    auto m = model::load(path);
    EXPECT_EQ(m->hp().rope_freq_base, 10000.0f);
    EXPECT_EQ(m->hp().expert_weights_scale, 1.5f);
}

TEST(Catalogue, HashTableWithInvalidExpertIsRejected) {
    auto b = model_file_builder::micro();
    b.hash_value = 8;  // n_expert is 8: ids must be 0..7
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'blk.0.ffn_gate_tid2eid.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expert 8"), std::string::npos) << msg;
}

TEST(Catalogue, VocabularyLengthMustMatch) {
    auto b = model_file_builder::micro();
    b.edit_metadata = [](gguf::writer& w) {
        w.set("tokenizer.ggml.tokens", gguf::value::make_string_array({"a", "b", "c"}));
    };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected 512 tokens"), std::string::npos) << msg;
}

TEST(Catalogue, MtpBlockInMainFileOrSeparateFile) {
    auto b = model_file_builder::micro();
    b.with_mtp = true;
    const std::string dir = test::temp_dir();
    b.write(dir + "/with_mtp.gguf");
    auto m = model::load(dir + "/with_mtp.gguf");
    ASSERT_TRUE(m->weights().mtp.has_value());
    EXPECT_TRUE(m->weights().mtp->e_proj);
    EXPECT_TRUE(m->weights().mtp->block.exp_probs_b);  // required for the MTP block
    EXPECT_EQ(m->weights().mtp->block.compress_ratio, 0u);

    auto main_only = model_file_builder::micro();
    main_only.write(dir + "/main.gguf");
    auto mtp_file = model_file_builder::micro();
    mtp_file.mtp_only = true;
    mtp_file.write(dir + "/mtp.gguf");
    load_options lo;
    lo.mtp_path = dir + "/mtp.gguf";
    auto m2 = model::load(dir + "/main.gguf", lo);
    ASSERT_TRUE(m2->weights().mtp.has_value());
    EXPECT_TRUE(m2->weights().mtp->h_proj);

    load_options need;
    need.require_mtp = true;
    try {
        model::load(dir + "/main.gguf", need);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("mtp.0.e_proj.weight"), std::string::npos) << e.what();
    }
}

TEST(Catalogue, MtpExpertBiasIsRequired) {
    auto b = model_file_builder::micro();
    b.with_mtp = true;
    b.edit_tensor = [](tensor_spec& s, ggml_type&) { return s.name != "mtp.0.exp_probs_b.bias"; };
    const std::string msg = load_error(b);
    EXPECT_NE(msg.find("'mtp.0.exp_probs_b.bias'"), std::string::npos) << msg;
}

TEST(Presets, FlashAndProMatchSpec) {
    const hparams f = preset_flash();
    EXPECT_EQ(f.n_layer, 43u);
    EXPECT_EQ(f.compress_ratios.size(), 44u);
    EXPECT_EQ(f.count_layers_with_ratio(0), 2u);
    EXPECT_EQ(f.count_layers_with_ratio(4), 21u);
    EXPECT_EQ(f.count_layers_with_ratio(128), 20u);
    EXPECT_EQ(f.o_group_in(), 4096u);
    const hparams p = preset_pro();
    EXPECT_EQ(p.n_layer, 61u);
    EXPECT_EQ(p.count_layers_with_ratio(4), 30u);
    EXPECT_EQ(p.count_layers_with_ratio(128), 31u);
    EXPECT_EQ(p.n_indexer_top_k, 1024u);
    EXPECT_NO_THROW(f.validate());
    EXPECT_NO_THROW(p.validate());
}

// Spec model.md §8.2 table: per-token bytes, raw windows and frontiers for Flash and Pro.
TEST(Memory, MatchesSpecFormulas) {
    const hparams f = preset_flash();
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(f, 4), 13760.0);
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(f, 2), 6880.0);
    kv_memory m = estimate_kv_memory(f, 32768, 4);
    EXPECT_EQ(m.raw_window_bytes, 43ull * 128 * 512 * 4);                 // 10.75 MiB
    EXPECT_EQ(m.frontier_bytes, 21ull * 80 * 1024 + 20ull * 512 * 1024);  // 11.64 MiB
    EXPECT_EQ(m.growing_bytes, 32768ull * 13760);
    const hparams p = preset_pro();
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(p, 4), 19696.0);
    kv_memory mp = estimate_kv_memory(p, 131072, 2);
    EXPECT_EQ(mp.growing_bytes, 131072ull * 9848);
    // The window never exceeds the context.
    EXPECT_EQ(estimate_kv_memory(f, 10, 4).raw_window_bytes, 43ull * 10 * 512 * 4);
}

}  // namespace
}  // namespace magnetar
