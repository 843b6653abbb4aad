// DeepSeek V4.1 (`deepseek41`) model layer: derived layer roles (spec v41.md §1.2-§1.3), the
// presets, Engram primes / offsets / multipliers (§3.9.2-§3.9.3, §6.2), the C1-C8 validation and
// the key aliases (§2.4). The catalogue, generator and KV-memory tests are in
// v41_catalogue_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/v41_model_fixture.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using test::v41_builder;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

std::string validate_error(const hparams& hp) {
    try {
        hp.validate();
    } catch (const Error& e) {
        return e.what();
    }
    return "(valid)";
}

// Reads only the hyper-parameters of a metadata-only file.
hparams read_keys(const v41_builder& b) {
    const std::string path = test::temp_dir() + "/v41_keys.gguf";
    b.write(path, false);
    auto r = gguf::reader::open(path);
    return read_hparams(*r);
}

std::string read_keys_error(const v41_builder& b) {
    try {
        read_keys(b);
    } catch (const Error& e) {
        return e.what();
    }
    return "(read without error)";
}

gguf::value u32_array(const std::vector<uint32_t>& v) {
    std::vector<gguf::value> items;
    for (uint32_t x : v) items.push_back(gguf::value::make_u32(x));
    return gguf::value::make_array(gguf::value_type::u32, std::move(items));
}

gguf::value u64_array(const std::vector<uint64_t>& v) {
    std::vector<gguf::value> items;
    for (uint64_t x : v) items.push_back(gguf::value::make_u64(x));
    return gguf::value::make_array(gguf::value_type::u64, std::move(items));
}

// ---------------------------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------------------------

TEST(V41Roles, ReleasedScheduleMatchesSpecTable) {
    const hparams hp = preset_v41_flash();
    ASSERT_NO_THROW(hp.validate());
    EXPECT_EQ(hp.count_mode(layer_mode::full), 4u);
    EXPECT_EQ(hp.count_mode(layer_mode::reindex), 4u);
    EXPECT_EQ(hp.count_mode(layer_mode::reuse), 30u);
    EXPECT_EQ(hp.count_mode(layer_mode::swa_only), 2u);
    EXPECT_EQ(hp.count_mode(layer_mode::dspark), 3u);
    for (uint32_t il : {0u, 1u}) {
        EXPECT_EQ(hp.mode(il), layer_mode::swa_only);
        EXPECT_EQ(hp.kv_source(il), -1);
        EXPECT_EQ(hp.index_source(il), -1);
    }
    for (uint32_t il : {2u, 8u, 14u, 20u}) {
        EXPECT_EQ(hp.mode(il), layer_mode::full) << il;
        EXPECT_TRUE(hp.owns_index_k(il)) << il;
        EXPECT_EQ(hp.kv_source(il), static_cast<int32_t>(il));
    }
    for (uint32_t il : {24u, 28u, 32u, 36u}) {
        EXPECT_EQ(hp.mode(il), layer_mode::reindex) << il;
        EXPECT_FALSE(hp.owns_index_k(il));
        EXPECT_TRUE(hp.uses_candidates(il));
        EXPECT_EQ(hp.kv_source(il), 20);
        EXPECT_EQ(hp.index_source(il), static_cast<int32_t>(il));
    }
    EXPECT_TRUE(hp.is_candidate_src(20));
    EXPECT_FALSE(hp.uses_candidates(20));
    EXPECT_FALSE(hp.uses_candidates(14));
    EXPECT_FALSE(hp.is_candidate_src(24));
    // Reuse layers: KV from their group's source, top-k from the latest index source.
    for (uint32_t il = 3; il <= 7; ++il) {
        EXPECT_EQ(hp.mode(il), layer_mode::reuse);
        EXPECT_EQ(hp.kv_source(il), 2);
        EXPECT_EQ(hp.index_source(il), 2);
    }
    EXPECT_EQ(hp.kv_source(19), 14);
    EXPECT_EQ(hp.index_source(21), 20);
    for (uint32_t il = 25; il <= 27; ++il) {
        EXPECT_EQ(hp.kv_source(il), 20);
        EXPECT_EQ(hp.index_source(il), 24);
    }
    EXPECT_EQ(hp.index_source(39), 36);
    EXPECT_EQ(hp.mode(40), layer_mode::dspark);
    EXPECT_EQ(hp.mode(42), layer_mode::dspark);
    EXPECT_EQ(hp.engram_index(1), 0);
    EXPECT_EQ(hp.engram_index(14), 1);
    EXPECT_EQ(hp.engram_index(2), -1);
    EXPECT_EQ(hp.dspark_n_expert(), 128u);
    EXPECT_EQ(hp.dspark_n_expert_used(), 3u);
}

TEST(V41Roles, TinyScheduleMatchesSpecTable) {
    const hparams hp = preset_v41_tiny();
    ASSERT_NO_THROW(hp.validate());
    const layer_mode want[] = {layer_mode::swa_only, layer_mode::full,  layer_mode::reuse,
                               layer_mode::full,     layer_mode::full,  layer_mode::reuse,
                               layer_mode::reindex,  layer_mode::reuse, layer_mode::dspark,
                               layer_mode::dspark};
    for (uint32_t il = 0; il < 10; ++il) EXPECT_EQ(hp.mode(il), want[il]) << "layer " << il;
    const int32_t kv[] = {-1, 1, 1, 3, 4, 4, 4, 4};
    const int32_t ix[] = {-1, 1, 1, 3, 4, 4, 6, 6};
    for (uint32_t il = 0; il < 8; ++il) {
        EXPECT_EQ(hp.kv_source(il), kv[il]) << il;
        EXPECT_EQ(hp.index_source(il), ix[il]) << il;
    }
    EXPECT_TRUE(hp.is_candidate_src(4));
    EXPECT_TRUE(hp.uses_candidates(6));
    EXPECT_FALSE(hp.uses_candidates(4));
    EXPECT_FALSE(hp.owns_index_k(6));
    EXPECT_EQ(hp.count_mode(layer_mode::full), 3u);
    EXPECT_EQ(hp.count_mode(layer_mode::reindex), 1u);
    EXPECT_EQ(hp.count_mode(layer_mode::reuse), 3u);
    EXPECT_EQ(hp.count_mode(layer_mode::swa_only), 1u);
    EXPECT_EQ(hp.engram_index(0), 0);
    EXPECT_EQ(hp.engram_index(1), 1);
    EXPECT_EQ(hp.v41.engram.pad_id, 1u);
    // §6.3: tokens [5, 17, 300, 2, 511, 42] -> compressed [2, 8, 150, 1, 255, 21].
    const int32_t toks[] = {5, 17, 300, 2, 511, 42};
    const int32_t comp[] = {2, 8, 150, 1, 255, 21};
    for (int i = 0; i < 6; ++i)
        EXPECT_EQ(hp.v41.engram.token_map[static_cast<size_t>(toks[i])], comp[i]);
}

TEST(V41Presets, ByNameWithHelp) {
    bool mtp = false;
    const hparams t = preset_by_name("v41-tiny", &mtp);
    EXPECT_TRUE(t.is_v41());
    EXPECT_TRUE(mtp);
    EXPECT_EQ(t.n_layer, 8u);
    const hparams f = preset_by_name("v41-flash", &mtp);
    EXPECT_EQ(f.n_embd, 5120u);
    EXPECT_EQ(f.n_dspark(), 3u);
    EXPECT_CONTAINS(preset_names_help(), "v41-tiny");
    EXPECT_CONTAINS(preset_names_help(), "v41-flash");
}

// ---------------------------------------------------------------------------------------------
// Engram constants
// ---------------------------------------------------------------------------------------------

TEST(V41Engram, ReleasedPrimesOffsetsAndBound) {
    const hparams hp = preset_v41_flash();
    const auto& e = hp.v41.engram;
    const std::vector<uint64_t> l1 = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129,
                                      16000133, 16000183, 16000189, 16000207, 16000211, 16000253,
                                      16000277, 16000289, 16000307, 16000321, 16000339, 16000381,
                                      16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
    const std::vector<uint64_t> l14 = {16000477, 16000487, 16000499, 16000507, 16000511, 16000573,
                                       16000609, 16000627, 16000667, 16000669, 16000693, 16000697,
                                       16000711, 16000729, 16000759, 16000769, 16000781, 16000799,
                                       16000813, 16000819, 16000841, 16000877, 16000879, 16000889};
    const std::vector<uint64_t> o1 = {
        0,         16000057,  32000136,  48000217,  64000314,  80000435,  96000564,  112000697,
        128000880, 144001069, 160001276, 176001487, 192001740, 208002017, 224002306, 240002613,
        256002934, 272003273, 288003654, 304004047, 320004446, 336004849, 352005258, 368005705};
    const std::vector<uint64_t> o14 = {
        0,         16000477,  32000964,  48001463,  64001970,  80002481,  96003054,  112003663,
        128004290, 144004957, 160005626, 176006319, 192007016, 208007727, 224008456, 240009215,
        256009984, 272010765, 288011564, 304012377, 320013196, 336014037, 352014914, 368015793};
    ASSERT_EQ(e.primes.size(), 48u);
    EXPECT_EQ(std::vector<uint64_t>(e.primes.begin(), e.primes.begin() + 24), l1);
    EXPECT_EQ(std::vector<uint64_t>(e.primes.begin() + 24, e.primes.end()), l14);
    EXPECT_EQ(std::vector<uint64_t>(e.offsets.begin(), e.offsets.begin() + 24), o1);
    EXPECT_EQ(std::vector<uint64_t>(e.offsets.begin() + 24, e.offsets.end()), o14);
    EXPECT_EQ(e.multiplier_bound(), 46539438283891ull);
}

TEST(V41Engram, TinyPrimesOffsetsAndBound) {
    const hparams hp = preset_v41_tiny();
    const auto& e = hp.v41.engram;
    EXPECT_EQ(e.primes,
              (std::vector<uint64_t>{101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157}));
    EXPECT_EQ(e.offsets,
              (std::vector<uint64_t>{0, 101, 204, 311, 420, 533, 0, 131, 268, 407, 556, 707}));
    EXPECT_EQ(e.multiplier_bound(), 18014398509481983ull);
    // The recipe restarts the search for every n-gram size and skips primes already taken.
    EXPECT_EQ(engram_primes(100, 3, 1, 1), (std::vector<uint64_t>{101, 103}));
    EXPECT_EQ(engram_offsets({5, 7, 11, 13}, 2), (std::vector<uint64_t>{0, 5, 0, 11}));
}

// ---------------------------------------------------------------------------------------------
// Validation C1-C8
// ---------------------------------------------------------------------------------------------

TEST(V41Validate, C1RatioList) {
    hparams hp = preset_v41_tiny();
    hp.compress_ratios.resize(9);
    std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "compress_ratios");
    EXPECT_CONTAINS(m, "(C1)");
    hp = preset_v41_tiny();
    hp.compress_ratios[5] = 4;
    m = validate_error(hp);
    EXPECT_CONTAINS(m, "entry 5: expected 0, 1 or 2, got 4");
    hp = preset_v41_tiny();
    hp.compress_ratios[9] = 1;
    EXPECT_CONTAINS(validate_error(hp), "DSpark stage 1 and must be 0");
}

TEST(V41Validate, C2SourceLists) {
    hparams hp = preset_v41_tiny();
    hp.v41.kv_sources = {3, 1, 4};
    std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "kv_source_layer_ids");
    EXPECT_CONTAINS(m, "strictly increasing");
    hp = preset_v41_tiny();
    hp.v41.index_sources = {1, 4, 6};  // misses KV source 3
    m = validate_error(hp);
    EXPECT_CONTAINS(m, "KV source 3 is not an index source");
    EXPECT_CONTAINS(m, "(C2)");
    hp = preset_v41_tiny();
    hp.v41.kv_sources = {0, 1, 3, 4};
    hp.v41.index_sources = {0, 1, 3, 4, 6};
    EXPECT_CONTAINS(validate_error(hp), "layer 0 has attention.compress_ratios[0] = 0");
    hp = preset_v41_tiny();
    hp.v41.index_sources = {1, 3, 4, 6, 9};
    EXPECT_CONTAINS(validate_error(hp), "layer 9 is not a backbone layer");
}

TEST(V41Validate, C3OneCoordinateSpace) {
    hparams hp = preset_v41_tiny();
    hp.v41.kv_sources = {1, 3};  // layer 4 (ratio 1) would read layer 3's ratio-2 cache
    hp.v41.index_sources = {1, 3, 6};
    std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "layer 4 has ratio 1 but its KV source 3 has ratio 2 (C3)");
    hp = preset_v41_tiny();
    hp.v41.kv_sources = {3, 4};
    hp.v41.index_sources = {3, 4, 6};
    m = validate_error(hp);
    EXPECT_CONTAINS(m, "layer 1 (ratio 2) has no KV source at or before it (C3)");
}

TEST(V41Validate, C4CandidateSource) {
    hparams hp = preset_v41_tiny();
    hp.v41.candidate_source = 5;
    std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "candidate_source_layer_id");
    EXPECT_CONTAINS(m, "layer 5 is not an index source (C4)");
    hp = preset_v41_tiny();
    hp.v41.candidate_source = 1;  // later index source 3 reads another cache
    EXPECT_CONTAINS(validate_error(hp), "(C4)");
    hp = preset_v41_tiny();
    hp.v41.candidate_source = -1;
    EXPECT_EQ(validate_error(hp), "(valid)");
}

TEST(V41Validate, C5CandidatePool) {
    hparams hp = preset_v41_tiny();
    hp.v41.candidate_topk_blocks = 1;  // (1 - 1) * 4 + 1 = 1 < top_k 4
    const std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "candidate_topk_blocks");
    EXPECT_CONTAINS(m, "(C5)");
}

TEST(V41Validate, C6QuantizerBlocks) {
    hparams hp = preset_v41_tiny();
    hp.n_head_dim = hp.n_value_dim = 48;
    EXPECT_CONTAINS(validate_error(hp), "attention.key_length: must be a multiple of 32");
    hp = preset_v41_tiny();
    hp.n_q_lora = 48;
    EXPECT_CONTAINS(validate_error(hp), "Rq = 48 must be a multiple of 32");
    hp = preset_v41_tiny();
    hp.n_rot = 15;
    EXPECT_CONTAINS(validate_error(hp), "rope.dimension_count");
    hp = preset_v41_tiny();
    hp.n_indexer_head_dim = 48;
    EXPECT_CONTAINS(validate_error(hp), "indexer.key_length: must be a multiple of 32 (C6)");
    hp = preset_v41_tiny();
    hp.v41.engram.head_dim = 16;
    EXPECT_CONTAINS(validate_error(hp), "engram.key_length");
    hp = preset_v41_tiny();
    hp.n_o_group = 3;
    EXPECT_CONTAINS(validate_error(hp), "output_group_count: must divide attention.head_count 4");
}

TEST(V41Validate, C7TableRowsAndEngramArrays) {
    hparams hp = preset_v41_tiny();
    hp.v41.engram.num_embeddings[1] = 865;
    std::string m = validate_error(hp);
    EXPECT_CONTAINS(m, "engram.num_embeddings: entry 1 (layer 1): expected 864 rows");
    EXPECT_CONTAINS(m, "(C7)");
    hp = preset_v41_tiny();
    hp.v41.engram.multipliers[2] += 1;  // even
    EXPECT_CONTAINS(validate_error(hp), "engram.multipliers: entry 2");
    hp = preset_v41_tiny();
    hp.v41.engram.multipliers[0] = 2 * hp.v41.engram.multiplier_bound() + 1;  // v = bound
    EXPECT_CONTAINS(validate_error(hp), "engram.multipliers: entry 0");
    hp = preset_v41_tiny();
    hp.v41.engram.token_map.pop_back();
    EXPECT_CONTAINS(validate_error(hp),
                    "engram.token_map: expected exactly vocab_size = 512 entries, got 511");
    hp = preset_v41_tiny();
    hp.v41.engram.token_map[7] = 256;
    EXPECT_CONTAINS(validate_error(hp), "token 7 maps to 256");
    hp = preset_v41_tiny();
    hp.v41.engram.primes[3] = 113;
    EXPECT_CONTAINS(validate_error(hp), "engram.primes");
}

TEST(V41Validate, C8DSparkTargets) {
    hparams hp = preset_v41_tiny();
    hp.v41.dspark.target_layers = {5, 6, 6};
    EXPECT_CONTAINS(validate_error(hp), "layer 6 is listed twice (C8)");
    hp = preset_v41_tiny();
    hp.v41.dspark.target_layers = {5, 6, 8};
    EXPECT_CONTAINS(validate_error(hp), "layer 8 is not a backbone layer (block_count 8) (C8)");
    hp = preset_v41_tiny();
    hp.v41.dspark.n_expert_used = 5;
    EXPECT_CONTAINS(validate_error(hp), "dspark.expert_used_count");
}

// ---------------------------------------------------------------------------------------------
// Keys and aliases
// ---------------------------------------------------------------------------------------------

TEST(V41Keys, ProposedKeysRoundTrip) {
    v41_builder b;
    const hparams hp = read_keys(b);
    const hparams want = preset_v41_tiny();
    EXPECT_EQ(hp.arch, "deepseek41");
    EXPECT_EQ(hp.n_layer, want.n_layer);
    EXPECT_EQ(hp.compress_ratios, want.compress_ratios);
    EXPECT_EQ(hp.v41.kv_sources, want.v41.kv_sources);
    EXPECT_EQ(hp.v41.index_sources, want.v41.index_sources);
    EXPECT_EQ(hp.v41.candidate_source, 4);
    EXPECT_EQ(hp.v41.engram.token_map, want.v41.engram.token_map);
    EXPECT_EQ(hp.v41.engram.multipliers, want.v41.engram.multipliers);
    EXPECT_EQ(hp.v41.engram.primes, want.v41.engram.primes);
    EXPECT_EQ(hp.v41.engram.pad_id, 1u);
    EXPECT_EQ(hp.v41.dspark.target_layers, want.v41.dspark.target_layers);
    EXPECT_EQ(hp.v41.n_dspark, 2u);
    EXPECT_EQ(hp.rms_eps, 1e-20f);
    EXPECT_EQ(hp.v41.scoring_func, "sqrtsoftplus");
}

TEST(V41Keys, Ds4HfNamedAliases) {
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek41.attention.kv_source_layer_ids"));
        ASSERT_TRUE(w.remove("deepseek41.block_count"));
        ASSERT_TRUE(w.remove("deepseek41.rope.scaling.factor"));
        ASSERT_TRUE(w.remove("deepseek41.engram.num_embeddings"));
        ASSERT_TRUE(w.remove("deepseek41.engram.pad_id"));
        ASSERT_TRUE(w.remove("deepseek41.swiglu_clamp_exp"));
        ASSERT_TRUE(w.remove("deepseek41.engram.token_map"));
        ASSERT_TRUE(w.remove("deepseek41.engram.primes"));
        w.set("deepseek41.kv_source_layer_ids", gguf::value::make_i32_array({1, 3, 4}));
        w.set("deepseek41.num_hidden_layers", gguf::value::make_u64(8));
        w.set("deepseek41.rope_scaling.factor", gguf::value::make_f64(4.0));
        w.set("deepseek41.engram.rows", u64_array({660, 864}));
        w.set("deepseek41.engram_pad_token_id",
              gguf::value::make_u32(2));  // raw id -> token_map[2]
        w.set("deepseek41.swiglu_limit", gguf::value::make_f32(7.0f));
        std::vector<uint32_t> map(512);
        for (uint32_t t = 0; t < 512; ++t) map[t] = t / 2;
        w.set("deepseek41.engram.token_map", u32_array(map));  // ds4 writes u32[]
        w.set("deepseek41.engram.primes",
              u32_array({101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157}));
    };
    const hparams hp = read_keys(b);
    EXPECT_EQ(hp.n_layer, 8u);
    EXPECT_EQ(hp.v41.kv_sources, (std::vector<uint32_t>{1, 3, 4}));
    EXPECT_EQ(hp.rope_scaling_factor, 4.0f);
    EXPECT_EQ(hp.v41.engram.num_embeddings, (std::vector<uint64_t>{660, 864}));
    EXPECT_EQ(hp.v41.engram.pad_id, 1u);
    ASSERT_EQ(hp.swiglu_clamp.size(), 10u);
    EXPECT_EQ(hp.swiglu_clamp[9], 7.0f);
    EXPECT_EQ(hp.v41.engram.token_map[511], 255);
}

TEST(V41Keys, ConfigJsonAlias) {
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek41.attention.index_source_layer_ids"));
        ASSERT_TRUE(w.remove("deepseek41.attention.candidate_source_layer_id"));
        ASSERT_TRUE(w.remove("deepseek41.rope.scaling.original_context_length"));
        ASSERT_TRUE(w.remove("deepseek41.hyper_connection.count"));
        ASSERT_TRUE(w.remove("deepseek41.dspark.target_layer_ids"));
        w.set(
            "deepseek41.config",
            gguf::value::make_string(
                R"({"model_type": "deepseek_v41", "text_config": {"index_source_layer_ids": [1, 3, 4, 6],
                "candidate_source_layer_id": 4, "hc_mult": 4, "dspark_target_layer_ids": [5, 6, 7],
                "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 32}}})"));
    };
    const hparams hp = read_keys(b);
    EXPECT_EQ(hp.v41.index_sources, (std::vector<uint32_t>{1, 3, 4, 6}));
    EXPECT_EQ(hp.v41.candidate_source, 4);
    EXPECT_EQ(hp.rope_orig_ctx, 32u);
    EXPECT_EQ(hp.n_hc, 4u);
    EXPECT_EQ(hp.v41.dspark.target_layers, (std::vector<uint32_t>{5, 6, 7}));
}

TEST(V41Keys, Vcruz305EngramKeys) {
    // Those files carry primes / offsets but no vocab_size, num_embeddings or compressed size.
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek41.engram.vocab_size"));
        ASSERT_TRUE(w.remove("deepseek41.engram.num_embeddings"));
        ASSERT_TRUE(w.remove("deepseek41.engram.compressed_vocab_size"));
    };
    const hparams hp = read_keys(b);
    EXPECT_EQ(hp.v41.engram.num_embeddings, (std::vector<uint64_t>{660, 864}));
    EXPECT_EQ(hp.v41.engram.compressed_vocab, 256u);
    EXPECT_EQ(hp.v41.engram.primes, preset_v41_tiny().v41.engram.primes);
    EXPECT_EQ(hp.v41.engram.offsets, preset_v41_tiny().v41.engram.offsets);
    // Without the primes either, the missing key is named.
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek41.engram.vocab_size"));
        ASSERT_TRUE(w.remove("deepseek41.engram.primes"));
    };
    EXPECT_CONTAINS(read_keys_error(b), "'deepseek41.engram.vocab_size': required key is missing");
}

TEST(V41Keys, MissingSourceListFailsNamingTheKey) {
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        ASSERT_TRUE(w.remove("deepseek41.attention.kv_source_layer_ids"));
    };
    const std::string m = read_keys_error(b);
    EXPECT_CONTAINS(m, "'deepseek41.attention.kv_source_layer_ids'");
    EXPECT_CONTAINS(m, "required key is missing");
    EXPECT_CONTAINS(m, "'deepseek41.kv_source_layer_ids'");
}

TEST(V41Keys, BadEngramMetadataIsRejected) {
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.engram.token_map",
              gguf::value::make_i32_array(std::vector<int32_t>(300, 0)));
    };
    std::string m = read_keys_error(b);
    EXPECT_CONTAINS(m, "'deepseek41.engram.token_map'");
    EXPECT_CONTAINS(m, "expected exactly vocab_size = 512 entries, got 300");
    b.edit_metadata = [](gguf::writer& w) { ASSERT_TRUE(w.remove("deepseek41.engram.token_map")); };
    m = read_keys_error(b);
    EXPECT_CONTAINS(m, "'deepseek41.engram.token_map': required key is missing");
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.engram.num_embeddings", u64_array({660, 865}));
    };
    m = read_keys_error(b);
    EXPECT_CONTAINS(m, "engram.num_embeddings");
    EXPECT_CONTAINS(m, "expected 864 rows");
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.engram.primes",
              u64_array({101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 163}));
    };
    m = read_keys_error(b);
    EXPECT_CONTAINS(m, "'deepseek41.engram.primes': entry 11 is 163, the recomputed prime is 157");
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.engram.multipliers", u64_array({1, 3, 5}));
    };
    EXPECT_CONTAINS(read_keys_error(b), "engram.multipliers: expected 8 entries");
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.engram.encoding", gguf::value::make_string("q8_0"));
    };
    EXPECT_CONTAINS(read_keys_error(b), "unknown Engram table encoding 'q8_0'");
    b.edit_metadata = [](gguf::writer& w) {
        w.set("deepseek41.attention.kv_source_layer_ids", gguf::value::make_string("1,3,4"));
    };
    EXPECT_CONTAINS(read_keys_error(b), "expected an array of integers");
}

TEST(V41Keys, V4ArchitectureMessageUnchanged) {
    v41_builder b;
    b.edit_metadata = [](gguf::writer& w) {
        w.set("general.architecture", gguf::value::make_string("llama"));
    };
    const std::string m = read_keys_error(b);
    EXPECT_CONTAINS(m, "expected 'deepseek4', got 'llama'");
    EXPECT_CONTAINS(m, "deepseek41");
}

}  // namespace
}  // namespace magnetar
