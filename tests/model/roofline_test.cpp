// Roofline byte formulas (model/roofline.h, docs/performance.md): KV rows read per decode step
// on Flash at hand-computed positions, the indexer switch, weight bytes from a synthetic tensor
// directory, the MTP block, and from_file against the size statistics of a generated model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "forward_fixtures.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"
#include "model/model.h"
#include "model/roofline.h"
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
        const uint64_t e = (lw.ffn_gate_exps.n_bytes() + lw.ffn_up_exps.n_bytes() +
                            lw.ffn_down_exps.n_bytes()) / m->hp().n_expert;
        EXPECT_EQ(rl.blocks()[il].expert, e) << il;
    }
}

}  // namespace
}  // namespace magnetar
