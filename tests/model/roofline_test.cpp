// Roofline byte formulas (model/roofline.h, docs/performance.md): KV rows read per decode step
// on Flash at hand-computed positions, the indexer switch, weight bytes from a synthetic tensor
// directory, the MTP block, and from_file against the size statistics of a generated model.
// DeepSeek V4.1: weight and packed-KV bytes by hand on the v41-tiny shape (position by position
// through the indexer, compressor-group and candidate-pool switches) and at the released V4.1
// Flash shape, and from_file on the generated v41-tiny model.
#include "model/roofline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "forward_fixtures.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"
#include "model/model.h"
#include "model/stats.h"

namespace magnetar {
namespace {

// Every catalogue tensor as F32 (4 bytes per element).
std::vector<roofline::tensor_bytes> f32_directory(const hparams& hp, bool with_mtp) {
    std::vector<roofline::tensor_bytes> out;
    for (const tensor_spec& s : tensor_catalogue(hp, with_mtp)) {
        uint64_t n = 1;
        for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
        roofline::tensor_bytes t;
        t.spec = s;
        t.n_bytes = 4 * n;
        t.row_bytes = 4 * static_cast<uint64_t>(s.ne[0]);
        out.push_back(t);
    }
    return out;
}

// A V4.1 directory: bytes per element by dtype class (`f32`: every float class as F32;
// otherwise the lossless GGUF profile: BF16 matrices, F32 norms, MXFP4 experts); Engram
// tables are I8 row264 rows in both.
std::vector<roofline::tensor_bytes> v41_directory(const hparams& hp, bool f32) {
    std::vector<roofline::tensor_bytes> out;
    for (const tensor_spec& s : tensor_catalogue(hp, false)) {
        uint64_t n = 1;
        for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
        auto bytes = [&](uint64_t elems) -> uint64_t {
            if (s.dtype == dtype_class::engram_table) return elems;
            if (f32) return 4 * elems;
            switch (s.dtype) {
                case dtype_class::dense:
                case dtype_class::float_any:
                    return 2 * elems;
                case dtype_class::routed_expert_v41:
                    return elems / 32 * 17;
                default:
                    return 4 * elems;
            }
        };
        roofline::tensor_bytes t;
        t.spec = s;
        t.n_bytes = bytes(n);
        t.row_bytes = bytes(static_cast<uint64_t>(s.ne[0]));
        out.push_back(t);
    }
    return out;
}

// v41-tiny (spec v41.md §6.1), every float tensor F32. By hand from the shapes: a block's
// common tensors (HC mixers 2 x (1024 x 24 + 27), norms, q_a / q_b / kv 3 x 16384, sinks 4,
// wo_a 16384, wo_b 32768, router 2048 + 8, shared expert 3 x 32768) are 248,514 floats =
// 994,056 B; Full layers add the compressor (r = 2: kv + gate 2 x 16384 floats; r = 1: kv
// only) and, when a group completes, its norm + index key projection + norm (64 + 4096 + 64
// floats = 16,896 B); index sources add the index query (64 x 256 + 256 x 4 floats = 69,632 B)
// while they score; Engram layers 0 and 1 add engram_kv + q / k weights (245,760 + 2 x 1024
// floats = 991,232 B) and C = 6 gathered rows of 33 B; globals: an embedding row (1 KiB), the
// output norm (1 KiB) and the head (512 KiB). One expert: 3 x 256 x 128 floats.
TEST(Roofline, V41TinyWeightBytesByHand) {
    const hparams hp = preset_v41_tiny();
    const roofline rl(hp, v41_directory(hp, true), false);
    ASSERT_EQ(rl.blocks().size(), 8u);  // the DSpark stages are not counted
    EXPECT_EQ(rl.global_bytes(), 526336u);
    const std::vector<layer_mode> modes = {
        layer_mode::swa_only, layer_mode::full,  layer_mode::reuse,   layer_mode::full,
        layer_mode::full,     layer_mode::reuse, layer_mode::reindex, layer_mode::reuse};
    for (uint32_t b = 0; b < 8; ++b) {
        const block_bytes& bb = rl.blocks()[b];
        EXPECT_EQ(bb.mode, modes[b]) << b;
        EXPECT_EQ(bb.expert, 393216u) << b;
        EXPECT_EQ(bb.all_experts, 8u * 393216u) << b;
        EXPECT_EQ(bb.gather, b < 2 ? 198u : 0u) << b;
        const bool index_source = b == 1 || b == 3 || b == 4 || b == 6;
        EXPECT_EQ(bb.indexer_q, index_source ? 69632u : 0u) << b;
        const bool full = b == 1 || b == 3 || b == 4;
        EXPECT_EQ(bb.on_emit, full ? 16896u : 0u) << b;
    }
    EXPECT_EQ(rl.blocks()[0].fixed, 994056u + 991232u + 198u);
    EXPECT_EQ(rl.blocks()[1].fixed, 994056u + 991232u + 198u + 131072u);
    EXPECT_EQ(rl.blocks()[2].fixed, 994056u);
    EXPECT_EQ(rl.blocks()[4].fixed, 994056u + 65536u);

    // p = 0: nothing scores (K = 4), no ratio-2 group completes, layer 4 (r = 1) emits.
    EXPECT_EQ(rl.dense_bytes(0), 10806220u);
    // p = 1: the ratio-2 groups of layers 1 and 3 complete.
    EXPECT_EQ(rl.dense_bytes(1), 10806220u + 2 * 16896u);
    // p = 6: 7 ratio-1 entries > K: layers 4 and 6 score (6's pool: 2 blocks <= NB, all 7).
    EXPECT_EQ(rl.dense_bytes(6), 10806220u + 2 * 69632u);
    EXPECT_EQ(rl.scored_keys(4, 6), 7u);
    EXPECT_EQ(rl.scored_keys(6, 6), 7u);
    EXPECT_EQ(rl.scored_keys(1, 6), 0u);  // 3 ratio-2 entries: all picked
    EXPECT_EQ(rl.dense_bytes(7), 10979276u);
    // p = 9: 5 ratio-2 entries, so the ratio-2 sources score too, and their groups complete.
    EXPECT_EQ(rl.dense_bytes(9), 10806220u + 4 * 69632u + 2 * 16896u);
    EXPECT_EQ(rl.scored_keys(6, 9), 6u);  // 3 blocks > NB: one full block + entries 8, 9
    // p = 40: everything scores, no ratio-2 group completes.
    EXPECT_EQ(rl.dense_bytes(40), 11084748u);
    EXPECT_EQ(rl.weight_bytes_nominal(40), 11084748u + 8u * 3u * 393216u);
    std::vector<uint32_t> sel(8, 3);
    sel[5] = 2;
    EXPECT_EQ(rl.weight_bytes(40, sel), 11084748u + 23u * 393216u);
    uint64_t total = 0;
    for (const auto& t : v41_directory(hp, true)) total += t.n_bytes;
    EXPECT_EQ(rl.file_weight_bytes(), total);
}

// Packed rows of v41-tiny: window rows 64 + 2 = 66 B, compressed rows 32 + 4 = 36 B, index
// keys 32 + 2 = 34 B; W = 8, K = 4, candidate blocks NB = 2 of B = 4 entries.
TEST(Roofline, V41TinyKvBytesByHand) {
    const hparams hp = preset_v41_tiny();
    const roofline rl(hp, v41_directory(hp, true), false);
    // p = 0: one window row per layer; layers 4-7 attend entry 0, no ratio-2 entry yet.
    kv_read_bytes k = rl.kv_bytes(0);
    EXPECT_EQ(k.raw, 8u * 66u);
    EXPECT_EQ(k.comp, 4u * 36u);
    EXPECT_EQ(k.index, 0u);
    // p = 6: 7 window rows; ratio 2: 3 entries x 3 layers, ratio 1: top-4 of 7 x 4 layers;
    // layers 4 and 6 score all 7 keys.
    k = rl.kv_bytes(6);
    EXPECT_EQ(k.raw, 8u * 7u * 66u);
    EXPECT_EQ(k.comp, 3u * 3u * 36u + 4u * 4u * 36u);
    EXPECT_EQ(k.index, 2u * 7u * 34u);
    EXPECT_EQ(k.total(), 5072u);
    // p = 40: full windows; 20 ratio-2 and 41 ratio-1 entries. Layers 1 and 3 score 20 keys,
    // layer 4 all 41, layer 6 only its pool: 11 blocks > NB, so the newest block (entry 40
    // alone) and one full block: 4 + 1 = 5 keys.
    k = rl.kv_bytes(40);
    EXPECT_EQ(k.raw, 8u * 8u * 66u);
    EXPECT_EQ(k.comp, 7u * 4u * 36u);
    EXPECT_EQ(rl.scored_keys(6, 40), 5u);
    EXPECT_EQ(k.index, 2u * 20u * 34u + 41u * 34u + 5u * 34u);
    EXPECT_EQ(k.total(), 8156u);
    // p = 42: the newest block holds entries 40..42: a pool of 4 + 3.
    EXPECT_EQ(rl.scored_keys(6, 42), 7u);
    EXPECT_EQ(rl.kv_bytes(42).total(), 8360u);
}

// The released V4.1 Flash shape (spec v41.md §1.1-§1.2, §5.4) with the lossless profile's
// sizes. Weights at p = 65535 (every index source scores, the ratio-2 groups complete): per
// block 329,958,360 B of common tensors (q_b 83.9 MB, wo_a 67.1 MB, wo_b 83.9 MB, shared
// expert 70.8 MB, ...); Full layers the compressor (r = 2: 10,485,760 B, r = 1: 5,242,880 B)
// and 133,632 B on completion; 8 index sources x 10,813,440 B of index query; Engram layers 1
// and 14 x (314,736,640 B + 24 rows x 264 B); globals 1,323,857,920 B (head, norm, BF16
// embedding row). One MXFP4 expert: 3 x 5120 x 2304 / 32 x 17 = 18,800,640 B.
TEST(Roofline, V41FlashBytesByHand) {
    const hparams hp = preset_v41_flash();
    const roofline rl(hp, v41_directory(hp, false), false);
    ASSERT_EQ(rl.blocks().size(), 40u);
    EXPECT_EQ(hp.count_mode(layer_mode::full), 4u);
    EXPECT_EQ(hp.count_mode(layer_mode::reindex), 4u);
    EXPECT_EQ(rl.blocks()[1].gather, 24u * 264u);
    EXPECT_EQ(rl.blocks()[3].expert, 18800640u);
    EXPECT_EQ(rl.blocks()[2].indexer_q, 10813440u);
    EXPECT_EQ(rl.blocks()[24].indexer_q, 10813440u);
    EXPECT_EQ(rl.blocks()[2].on_emit, 133632u);
    EXPECT_EQ(rl.dense_bytes(65535), 15275420480ull);
    EXPECT_EQ(rl.weight_bytes_nominal(65535), 15275420480ull + 40ull * 6 * 18800640);
    // p = 511: 512 ratio-1 entries = K, nothing scores; p = 512: the 5 ratio-1 index sources
    // score, and no ratio-2 group completes (3 x 133,632 B fewer).
    EXPECT_EQ(rl.dense_bytes(511), 15188912960ull);
    EXPECT_EQ(rl.dense_bytes(512), 15188912960ull + 5ull * 10813440 - 3ull * 133632);

    // KV at p = 65535 (65,536 tokens): 40 x 128 window rows of 528 B; top-512 rows of 288 B in
    // the 38 compressed layers; index keys of 68 B: the ratio-2 sources 32,768 each, layer 20
    // 65,536, and the Reindex layers 24-36 their pool of 2047 x 8 + 8 = 16,384 each.
    kv_read_bytes k = rl.kv_bytes(65535);
    EXPECT_EQ(k.raw, 40ull * 128 * 528);
    EXPECT_EQ(k.comp, 38ull * 512 * 288);
    EXPECT_EQ(k.index, (3ull * 32768 + 65536 + 4ull * 16384) * 68);
    EXPECT_EQ(k.total(), 23904256u);
    // One more token: 65,537 ratio-1 entries, the newest pool block holds only entry 65,536.
    EXPECT_EQ(rl.scored_keys(24, 65536), 2047u * 8 + 1);
    EXPECT_EQ(rl.kv_bytes(65536).total(), 23902420u);
    // Below top-k: every visible entry attended, nothing scored.
    k = rl.kv_bytes(511);
    EXPECT_EQ(k.comp, 18ull * 256 * 288 + 20ull * 512 * 288);
    EXPECT_EQ(k.index, 0u);
}

TEST(Roofline, V41FromFileLeavesDSparkOut) {
    const std::string& path = test::tiny_model("v41-tiny", "lossless");
    const auto m = model::load(path);
    const auto file = gguf::reader::open(path);
    const roofline rl = roofline::from_file(*file);
    EXPECT_FALSE(rl.has_mtp());
    ASSERT_EQ(rl.blocks().size(), m->hp().n_layer);
    ASSERT_TRUE(m->weights().v41);
    for (uint32_t il = 0; il < m->hp().n_layer; ++il) {
        const v41_block_weights& lw = m->weights().v41->layers[il];
        const uint64_t e =
            (lw.ffn_gate_exps.n_bytes() + lw.ffn_up_exps.n_bytes() + lw.ffn_down_exps.n_bytes()) /
            m->hp().n_expert;
        EXPECT_EQ(rl.blocks()[il].expert, e) << il;
        EXPECT_EQ(rl.blocks()[il].mode, m->hp().mode(il)) << il;
    }
    // The lossless profile stores Engram rows as row264 (33 B at ED = 32): 6 rows per token.
    EXPECT_EQ(rl.blocks()[0].gather, 6u * 33u);
    EXPECT_EQ(rl.blocks()[1].gather, 6u * 33u);
    EXPECT_EQ(rl.kv_bytes(40).total(), 8156u);  // the cache formats do not depend on the file
}

TEST(Roofline, FlashKvBytesByHand) {
    const hparams hp = preset_flash();  // 2 x ratio 0, 21 x ratio 4, 20 x ratio 128
    ASSERT_EQ(hp.count_layers_with_ratio(4), 21u);
    ASSERT_EQ(hp.count_layers_with_ratio(128), 20u);
    const roofline rl(hp, f32_directory(hp, false), false);
    const uint64_t row = 512 * 4, irow = 128 * 4;

    // Position 2047 (2048 tokens visible): full windows, 512 ratio-4 rows (exactly top-k, so the
    // indexer does not score), 16 ratio-128 rows.
    kv_read_bytes k = rl.kv_bytes(2047);
    EXPECT_EQ(k.raw, 43ull * 128 * row);
    EXPECT_EQ(k.comp, 21ull * 512 * row + 20ull * 16 * row);
    EXPECT_EQ(k.index, 0u);
    EXPECT_EQ(k.total(), 33947648u);
    EXPECT_FALSE(rl.indexer_active(2047));

    // Position 4095: the indexer scores 1024 rows per ratio-4 layer, attention reads top-k.
    k = rl.kv_bytes(4095);
    EXPECT_EQ(k.comp, 21ull * 512 * row + 20ull * 32 * row);
    EXPECT_EQ(k.index, 21ull * 1024 * irow);
    EXPECT_EQ(k.total(), 45613056u);
    EXPECT_TRUE(rl.indexer_active(4095));

    // Short context: only the rows that exist.
    k = rl.kv_bytes(9);  // 10 tokens: 10 raw rows per layer, 2 ratio-4 rows, no ratio-128 row
    EXPECT_EQ(k.raw, 43ull * 10 * row);
    EXPECT_EQ(k.comp, 21ull * 2 * row);
    EXPECT_EQ(k.index, 0u);

    // 32k: ratio-128 rows keep growing, ratio-4 attention stays at top-k.
    k = rl.kv_bytes(32767);
    EXPECT_EQ(k.comp, 21ull * 512 * row + 20ull * 256 * row);
    EXPECT_EQ(k.index, 21ull * 8192 * irow);
}

// Multiply-adds by hand at the Flash shape (D = 4096, q rank 1024, 64 heads of 512, 8 output
// groups of rank 1024, HC 4 x 4096 -> 24 mixers, 256 experts of 2048, indexer 64 heads of 128):
// every block has the HC mixers (2 x 16384 x 24), q_a (4096 x 1024), q_b (1024 x 32768), kv
// (4096 x 512), wo_a (4096 x 8192), wo_b (8192 x 4096), the router (4096 x 256) and the shared
// expert (3 x 4096 x 2048); ratio-4 blocks add the compressor (kv + gate, 2 x 4096 x 1024) and
// the indexer's compressor (2 x 4096 x 256), ratio-128 blocks their compressor (2 x 4096 x
// 512). Attention: 2 x 64 x 512 per row attended, 64 x 128 per indexer row scored.
TEST(Roofline, FlashPrefillFlopsByHand) {
    const hparams hp = preset_flash();
    const roofline rl(hp, f32_directory(hp, false), false);
    ASSERT_EQ(hp.compress_ratio(0), 0u);
    ASSERT_EQ(hp.compress_ratio(2), 4u);
    ASSERT_EQ(hp.compress_ratio(3), 128u);
    const uint64_t common = 2ull * 16384 * 24 + 4096ull * 1024 + 1024ull * 32768 + 4096ull * 512 +
                            4096ull * 8192 + 8192ull * 4096 + 4096ull * 256 + 3ull * 4096 * 2048;
    EXPECT_EQ(rl.blocks()[0].fixed_macs, common);
    EXPECT_EQ(rl.blocks()[2].fixed_macs, common + 2ull * 4096 * 1024 + 2ull * 4096 * 256);
    EXPECT_EQ(rl.blocks()[3].fixed_macs, common + 2ull * 4096 * 512);
    const uint64_t idx_q = 1024ull * 8192 + 4096ull * 64;
    const uint64_t expert = 3ull * 4096 * 2048;
    for (uint32_t b = 0; b < hp.n_layer; ++b) {
        EXPECT_EQ(rl.blocks()[b].expert_macs, expert) << b;
        EXPECT_EQ(rl.blocks()[b].indexer_q_macs, hp.compress_ratio(b) == 4 ? idx_q : 0u) << b;
    }

    // Rows attended as in FlashKvBytesByHand; the indexer scores from position 2051 on.
    const uint64_t per_row = 2ull * 64 * 512;
    EXPECT_EQ(rl.attention_macs(2047), (43ull * 128 + 21ull * 512 + 20ull * 16) * per_row);
    EXPECT_EQ(rl.attention_macs(4095),
              (43ull * 128 + 21ull * 512 + 20ull * 32) * per_row + 21ull * 1024 * 64 * 128);
    EXPECT_EQ(rl.kv_rows(4095).index, 21ull * 1024);

    uint64_t fixed = 0;
    for (const block_bytes& b : rl.blocks()) fixed += b.fixed_macs;
    EXPECT_EQ(rl.prefill_flops(2047),
              2.0 * static_cast<double>(fixed + 43 * 6 * expert + rl.attention_macs(2047)));
    EXPECT_EQ(
        rl.prefill_flops(4095),
        2.0 * static_cast<double>(fixed + 43 * 6 * expert + 21 * idx_q + rl.attention_macs(4095)));
    // About 13 G multiply-adds per token without the head: the "13B active" of V4 Flash.
    EXPECT_GT(rl.prefill_flops(2047), 2 * 11e9);
    EXPECT_LT(rl.prefill_flops(2047), 2 * 14e9);
}

// v41-tiny multiply-adds by hand (see V41TinyWeightBytesByHand): a Reuse block's matrices are
// the HC mixers (2 x 1024 x 24), q_a / q_b / kv (3 x 16384), wo_a (16384), wo_b (32768), the
// router (256 x 8) and the shared expert (3 x 32768); the r = 1 Full block 4 adds its
// compressor kv (16384); index sources score with 64 x 256 + 256 x 4, Full blocks emit with the
// 64 x 64 key projection.
TEST(Roofline, V41TinyMacsByHand) {
    const hparams hp = preset_v41_tiny();
    const roofline rl(hp, v41_directory(hp, true), false);
    const uint64_t common = 2ull * 1024 * 24 + 3ull * 16384 + 16384 + 32768 + 2048 + 3ull * 32768;
    EXPECT_EQ(rl.blocks()[2].fixed_macs, common);
    EXPECT_EQ(rl.blocks()[4].fixed_macs, common + 16384);
    for (uint32_t b = 0; b < 8; ++b) {
        const bool index_source = b == 1 || b == 3 || b == 4 || b == 6;
        const bool full = b == 1 || b == 3 || b == 4;
        EXPECT_EQ(rl.blocks()[b].indexer_q_macs, index_source ? 64u * 256 + 256 * 4 : 0u) << b;
        EXPECT_EQ(rl.blocks()[b].on_emit_macs, full ? 4096u : 0u) << b;
        EXPECT_EQ(rl.blocks()[b].expert_macs, 3u * 256 * 128) << b;
    }
    // Position 1 completes the ratio-2 groups of blocks 1 and 3 (and every r = 1 group of 4);
    // position 2 completes only block 4's; nothing scores at either (K = 4).
    EXPECT_EQ(rl.prefill_flops(1) - rl.prefill_flops(2),
              2.0 * static_cast<double>(2 * 4096 + rl.attention_macs(1)) -
                  2.0 * static_cast<double>(rl.attention_macs(2)));
    // The attention's rows are the packed rows of kv_bytes.
    for (int64_t pos : {0, 6, 9, 40}) {
        const kv_read_rows n = rl.kv_rows(pos);
        EXPECT_EQ(rl.attention_macs(pos), (n.raw + n.comp) * 2 * hp.n_head * hp.n_head_dim +
                                              n.index * hp.n_indexer_head * hp.n_indexer_head_dim)
            << pos;
    }
}

TEST(Roofline, WeightBytesFromDirectory) {
    const hparams hp = preset_tiny();
    const auto dir = f32_directory(hp, false);
    const roofline rl(hp, dir, false);
    ASSERT_EQ(rl.blocks().size(), hp.n_layer);

    // Expected by hand: every tensor once, except routed experts (k of E), the embedding and
    // the hash tables (one row each) and the indexer query projections (only when scoring).
    const uint64_t D = hp.n_embd, F = hp.n_ff_exp, E = hp.n_expert, k = hp.n_expert_used;
    uint64_t total = 0, experts = 0, idx_q = 0, hash_rows = 0, embd = 0;
    for (const auto& t : dir) total += t.n_bytes;
    for (const auto& t : dir) {
        if (t.spec.role == tensor_role::routed_expert) experts += t.n_bytes;
        if (t.spec.suffix == "indexer.attn_q_b.weight" || t.spec.suffix == "indexer.proj.weight")
            idx_q += t.n_bytes;
        if (t.spec.role == tensor_role::hash_table) hash_rows += t.n_bytes - 4 * k;
        if (t.spec.role == tensor_role::embedding) embd += t.n_bytes - 4 * D;
    }
    EXPECT_EQ(rl.file_weight_bytes(), total);
    EXPECT_EQ(experts, hp.n_layer * 3 * D * F * E * 4);
    for (const block_bytes& b : rl.blocks()) {
        EXPECT_EQ(b.expert, 3 * D * F * 4);
        EXPECT_EQ(b.all_experts, 3 * D * F * E * 4);
    }
    const uint64_t dense_idle = total - experts - idx_q - hash_rows - embd;
    EXPECT_EQ(rl.dense_bytes(0), dense_idle);
    // The indexer of ratio-4 layers scores once more than top_k rows are visible.
    const int64_t first_active = 4 * (static_cast<int64_t>(hp.n_indexer_top_k) + 1) - 1;
    EXPECT_FALSE(rl.indexer_active(first_active - 1));
    EXPECT_TRUE(rl.indexer_active(first_active));
    EXPECT_EQ(rl.dense_bytes(first_active), dense_idle + idx_q);
    EXPECT_EQ(rl.weight_bytes_nominal(0), dense_idle + hp.n_layer * k * 3 * D * F * 4);
    std::vector<uint32_t> sel(hp.n_layer, 1);
    sel[2] = 0;
    EXPECT_EQ(rl.weight_bytes(0, sel), dense_idle + (hp.n_layer - 1) * 3 * D * F * 4);
    // Globals: one embedding row, the head, output norm and output HC collapse.
    uint64_t globals = 4 * D;
    for (const auto& t : dir) {
        if (t.spec.layer < 0 && t.spec.role != tensor_role::embedding) globals += t.n_bytes;
    }
    EXPECT_EQ(rl.global_bytes(), globals);
}

TEST(Roofline, MtpBlockCounted) {
    const hparams hp = preset_tiny();
    const roofline plain(hp, f32_directory(hp, false), false);
    const roofline mtp(hp, f32_directory(hp, true), true);
    ASSERT_EQ(mtp.blocks().size(), hp.n_layer + 1u);
    EXPECT_EQ(mtp.blocks().back().ratio, 0u);
    // A second embedding row, and the MTP block's weights.
    EXPECT_EQ(mtp.global_bytes(), plain.global_bytes() + 4ull * hp.n_embd);
    EXPECT_EQ(mtp.dense_bytes(0),
              plain.dense_bytes(0) + 4ull * hp.n_embd + mtp.blocks().back().fixed);
    EXPECT_GT(mtp.blocks().back().fixed, 0u);
    // The MTP ring: the step's MTP row sits one position back.
    const uint64_t row = 4ull * hp.n_head_dim;
    EXPECT_EQ(mtp.kv_bytes(5).raw, plain.kv_bytes(5).raw + 5 * row);
    EXPECT_EQ(mtp.kv_bytes(0).raw, plain.kv_bytes(0).raw);
}

TEST(Roofline, FromFileMatchesSizeStats) {
    const std::string& path = test::tiny_model("tiny", "published");
    const auto m = model::load(path);
    const size_stats st = compute_size_stats(*m);
    const auto file = gguf::reader::open(path);
    const roofline rl = roofline::from_file(*file);
    EXPECT_EQ(rl.file_weight_bytes(), st.total_bytes);
    uint64_t all_experts = 0;
    for (const block_bytes& b : rl.blocks()) all_experts += b.all_experts;
    EXPECT_EQ(all_experts, st.routed_expert_bytes());
    // Published quant mix: an expert of a layer is 1/E of its three tensors.
    for (uint32_t il = 0; il < m->hp().n_layer; ++il) {
        const layer_weights& lw = m->weights().layers[il];
        const uint64_t e =
            (lw.ffn_gate_exps.n_bytes() + lw.ffn_up_exps.n_bytes() + lw.ffn_down_exps.n_bytes()) /
            m->hp().n_expert;
        EXPECT_EQ(rl.blocks()[il].expert, e) << il;
    }
}

}  // namespace
}  // namespace magnetar
