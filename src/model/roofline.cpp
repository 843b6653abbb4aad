#include "model/roofline.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/types.h"
#include "gguf/gguf.h"
#include "quant/fp8fp4.h"

namespace magnetar {

namespace {

constexpr uint64_t kCacheElemBytes = 4;  // FP32 cache storage (spec §12.1)

bool is_indexer_query(const tensor_spec& s) {
    return s.suffix == "indexer.attn_q_b.weight" || s.suffix == "indexer.proj.weight";
}

// V4.1 tensors of a KV source used only for a completed compressor group (spec v41.md §3.4,
// §3.5): the latent's norm, then the index key's projection and norm.
bool is_emit_only(const tensor_spec& s) {
    return s.suffix == "attn_compressor_norm.weight" || s.suffix == "indexer.attn_k.weight" ||
           s.suffix == "indexer.k_norm.weight";
}

// Whether a tensor is a matrix applied to the token's activations (its elements are
// multiply-adds): two or more dimensions, and not a table that is gathered or added.
bool is_product(const tensor_spec& s) {
    if (s.ne.size() < 2 || s.ne[1] < 2) return false;
    if (s.role == tensor_role::embedding || s.role == tensor_role::hash_table) return false;
    if (s.dtype == dtype_class::engram_table) return false;
    // The compressors' absolute position embeddings are added, not multiplied.
    return s.suffix.find("compressor_ape.weight") == std::string::npos;
}

uint64_t elements(const tensor_spec& s) {
    uint64_t n = 1;
    for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
    return n;
}

}  // namespace

roofline::roofline(const hparams& hp, const std::vector<tensor_bytes>& tensors, bool with_mtp)
    : hp_(hp), with_mtp_(with_mtp) {
    MAGNETAR_ASSERT(!(hp.is_v41() && with_mtp),
                    "roofline: the DSpark stages of a V4.1 model are not run by sessions");
    const bool v41 = hp.is_v41();
    const uint32_t n_blocks = hp.n_layer + (with_mtp ? 1 : 0);
    blocks_.resize(n_blocks);
    for (uint32_t b = 0; b < n_blocks; ++b) {
        blocks_[b].ratio = hp.compress_ratio(b);
        if (v41) blocks_[b].mode = hp.mode(b);
    }
    for (const tensor_bytes& t : tensors) {
        const tensor_spec& s = t.spec;
        file_bytes_ += t.n_bytes;
        if (s.layer < 0) {
            // One embedding row per token (the MTP block gathers its own copy); the head and
            // the output HC collapse are read whole.
            if (s.role == tensor_role::embedding) {
                global_ += t.row_bytes * (with_mtp ? 2 : 1);
            } else {
                global_ += t.n_bytes;
            }
            continue;
        }
        if (static_cast<uint32_t>(s.layer) >= n_blocks) continue;  // MTP tensors, block not run
        block_bytes& b = blocks_[static_cast<size_t>(s.layer)];
        const uint64_t macs = is_product(s) ? elements(s) : 0;
        if (s.role == tensor_role::routed_expert) {
            const uint64_t n_expert = s.ne.size() >= 3 ? static_cast<uint64_t>(s.ne[2]) : 1;
            b.expert += t.n_bytes / n_expert;
            b.all_experts += t.n_bytes;
            b.expert_macs += macs / n_expert;
        } else if (s.role == tensor_role::hash_table) {
            b.fixed += t.row_bytes;  // the token's row of expert ids
        } else if (is_indexer_query(s)) {
            b.indexer_q += t.n_bytes;
            b.indexer_q_macs += macs;
        } else if (v41 && s.dtype == dtype_class::engram_table) {
            // One row per Engram column: (max n-gram - 1) x heads rows of the layer's table.
            b.gather += t.row_bytes * hp.v41.engram.n_col();
            b.fixed += t.row_bytes * hp.v41.engram.n_col();
        } else if (v41 && is_emit_only(s)) {
            b.on_emit += t.n_bytes;
            b.on_emit_macs += macs;
        } else if (v41 && s.suffix == "exp_probs_b_vl.bias") {
            // The router bias of image tokens: never read for text.
        } else {
            b.fixed += t.n_bytes;
            b.fixed_macs += macs;
        }
    }
}

roofline roofline::from_file(const gguf::reader& file) {
    const hparams hp = read_hparams(file);
    const bool with_mtp =
        !hp.is_v41() && file.find_tensor(layer_prefix(hp, hp.n_layer) + "e_proj.weight") != nullptr;
    std::vector<tensor_bytes> tensors;
    for (tensor_spec& spec : tensor_catalogue(hp, with_mtp)) {
        const gguf::tensor_info* t = file.find_tensor(spec.name);
        if (!t) continue;  // optional and absent
        tensor_bytes tb;
        tb.n_bytes = t->n_bytes;
        tb.row_bytes = row_bytes(t->type, t->ne[0]);
        tb.spec = std::move(spec);
        tensors.push_back(std::move(tb));
    }
    return roofline(hp, tensors, with_mtp);
}

bool roofline::indexer_active(int64_t pos) const {
    return (pos + 1) / 4 > static_cast<int64_t>(hp_.n_indexer_top_k);
}

uint64_t roofline::scored_keys(uint32_t b, int64_t pos) const {
    if (!hp_.is_v41() || b >= hp_.n_layer || !hp_.is_index_source(b)) return 0;
    const auto visible = static_cast<uint64_t>((pos + 1) / blocks_[b].ratio);
    uint64_t keys = visible;
    if (hp_.uses_candidates(b)) {
        // The candidate pool (spec v41.md §3.6): every block while there are at most NB, else
        // NB blocks of B entries, one of them the newest (possibly partial) block.
        const uint64_t nb = hp_.v41.candidate_topk_blocks;
        const uint64_t bs = hp_.v41.candidate_block_size;
        if (visible > 0 && (visible + bs - 1) / bs > nb) {
            keys = (nb - 1) * bs + (visible - 1) % bs + 1;
        }
    }
    return keys > static_cast<uint64_t>(hp_.n_indexer_top_k) ? keys : 0;
}

uint64_t roofline::dense_bytes(int64_t pos) const {
    uint64_t n = global_;
    if (hp_.is_v41()) {
        for (uint32_t i = 0; i < blocks_.size(); ++i) {
            const block_bytes& b = blocks_[i];
            n += b.fixed;
            if (scored_keys(i, pos) > 0) n += b.indexer_q;
            if (b.mode == layer_mode::full && (pos + 1) % b.ratio == 0) n += b.on_emit;
        }
        return n;
    }
    const bool idx = indexer_active(pos);
    for (const block_bytes& b : blocks_) n += b.fixed + (b.ratio == 4 && idx ? b.indexer_q : 0);
    return n;
}

uint64_t roofline::weight_bytes(int64_t pos, const std::vector<uint32_t>& n_distinct) const {
    uint64_t n = dense_bytes(pos);
    for (size_t b = 0; b < blocks_.size() && b < n_distinct.size(); ++b) {
        n += blocks_[b].expert * n_distinct[b];
    }
    return n;
}

uint64_t roofline::weight_bytes_nominal(int64_t pos) const {
    return weight_bytes(pos, std::vector<uint32_t>(blocks_.size(), hp_.n_expert_used));
}

kv_read_bytes roofline::kv_bytes(int64_t pos) const {
    const kv_read_rows n = kv_rows(pos);
    uint64_t raw_row = 0, comp_row = 0, key_row = 0;
    if (hp_.is_v41()) {
        raw_row = static_cast<uint64_t>(quant::window_row_bytes(hp_.n_head_dim));
        comp_row = static_cast<uint64_t>(quant::main_kv_row_bytes(hp_.n_head_dim));
        key_row = static_cast<uint64_t>(quant::index_key_row_bytes(hp_.n_indexer_head_dim));
    } else {
        raw_row = comp_row = static_cast<uint64_t>(hp_.n_head_dim) * kCacheElemBytes;
        key_row = static_cast<uint64_t>(hp_.n_indexer_head_dim) * kCacheElemBytes;
    }
    kv_read_bytes r;
    r.raw = n.raw * raw_row;
    r.comp = n.comp * comp_row;
    r.index = n.index * key_row;
    return r;
}

kv_read_rows roofline::kv_rows(int64_t pos) const {
    if (hp_.is_v41()) return kv_rows_v41(pos);
    kv_read_rows r;
    const auto window = static_cast<uint64_t>(hp_.n_swa);
    const auto top_k = static_cast<uint64_t>(hp_.n_indexer_top_k);
    for (uint32_t b = 0; b < blocks_.size(); ++b) {
        if (b == hp_.n_layer) {
            // The MTP block's row for this step sits one position back (spec §12.4).
            r.raw += std::min<uint64_t>(window, static_cast<uint64_t>(pos));
            continue;
        }
        r.raw += std::min<uint64_t>(window, static_cast<uint64_t>(pos + 1));
        const uint32_t ratio = blocks_[b].ratio;
        if (ratio == 0) continue;
        const auto visible = static_cast<uint64_t>((pos + 1) / ratio);
        if (ratio == 4) {
            r.comp += std::min(visible, top_k);
            if (visible > top_k) r.index += visible;
        } else {
            r.comp += visible;
        }
    }
    return r;
}

kv_read_rows roofline::kv_rows_v41(int64_t pos) const {
    kv_read_rows r;
    const auto window = static_cast<uint64_t>(hp_.n_swa);
    const auto top_k = static_cast<uint64_t>(hp_.n_indexer_top_k);
    for (uint32_t b = 0; b < blocks_.size(); ++b) {
        // Every layer (Reuse included) attends over its own window ring.
        r.raw += std::min<uint64_t>(window, static_cast<uint64_t>(pos + 1));
        const uint32_t ratio = blocks_[b].ratio;
        if (ratio == 0) continue;
        // The top-k list it attends: its own (Full, Reindex) or its index source's (Reuse).
        const auto visible = static_cast<uint64_t>((pos + 1) / ratio);
        r.comp += std::min(visible, top_k);
        r.index += scored_keys(b, pos);
    }
    return r;
}

uint64_t roofline::attention_macs(int64_t pos) const {
    const kv_read_rows n = kv_rows(pos);
    const uint64_t per_row = 2 * static_cast<uint64_t>(hp_.n_head) * hp_.n_head_dim;
    const uint64_t per_key = static_cast<uint64_t>(hp_.n_indexer_head) * hp_.n_indexer_head_dim;
    return (n.raw + n.comp) * per_row + n.index * per_key;
}

double roofline::prefill_flops(int64_t pos) const {
    uint64_t macs = attention_macs(pos);
    const bool v4_idx = !hp_.is_v41() && indexer_active(pos);
    for (uint32_t i = 0; i < blocks_.size(); ++i) {
        const block_bytes& b = blocks_[i];
        macs += b.fixed_macs + b.expert_macs * hp_.n_expert_used;
        if (hp_.is_v41()) {
            if (scored_keys(i, pos) > 0) macs += b.indexer_q_macs;
            if (b.mode == layer_mode::full && (pos + 1) % b.ratio == 0) macs += b.on_emit_macs;
        } else if (b.ratio == 4 && v4_idx) {
            macs += b.indexer_q_macs;
        }
    }
    return 2.0 * static_cast<double>(macs);
}

}  // namespace magnetar
