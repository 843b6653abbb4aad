// DeepSeek V4.1 (`deepseek41`) model layer: derived layer roles (spec v41.md §1.2-§1.3), the
// C1-C8 validation, key aliases (§2.4), Engram primes / offsets / multipliers (§3.9.2-§3.9.3,
// §6.2), the tensor catalogue and binding (§2.3), the generator's storage profiles (§6.1) and
// the per-token KV bytes (§5.4).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "core/error.h"
#include "gen-model/gen_model.h"
#include "gguf/gguf.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stats.h"
#include "quant/fp16.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

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

#define EXPECT_CONTAINS(hay, needle) \
    EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

// Writes small V4.1 files from the catalogue (zero-filled tensors), with hooks to break one thing.
struct v41_builder {
    hparams hp = preset_v41_tiny();
    bool with_dspark = true;
    std::function<void(gguf::writer&)> edit_metadata;
    std::function<bool(tensor_spec&, ggml_type&)> edit_tensor;  // false: drop the tensor

    static ggml_type default_type(const tensor_spec& s) {
        switch (s.dtype) {
            case dtype_class::dense:
            case dtype_class::float_any:
            case dtype_class::matrix:
                return ggml_type::BF16;
            case dtype_class::routed_expert_v41:
                return ggml_type::MXFP4;
            case dtype_class::engram_table:
                return ggml_type::I8;
            default:
                return ggml_type::F32;
        }
    }

    void write(const std::string& path, bool tensors = true) const {
        gguf::writer w(path);
        write_hparams(w, hp);
        if (edit_metadata) edit_metadata(w);
        std::vector<std::pair<tensor_spec, ggml_type>> keep;
        if (tensors) {
            for (tensor_spec s : tensor_catalogue(hp, with_dspark)) {
                ggml_type t = default_type(s);
                if (edit_tensor && !edit_tensor(s, t)) continue;
                keep.emplace_back(s, t);
            }
        }
        for (const auto& [s, t] : keep) w.add_tensor(s.name, t, s.ne);
        for (const auto& [s, t] : keep) {
            uint64_t n = 1;
            for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
            std::vector<uint8_t> buf(*type_bytes(t, n), 0);
            w.write_tensor_data(buf.data(), buf.size());
        }
        w.finish();
    }
};

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
