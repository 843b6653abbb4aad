#include "model/memory.h"

#include <algorithm>
#include <limits>

namespace magnetar {

namespace {

// Saturating arithmetic: ctx comes from the user (inspect --ctx takes any 64-bit count), so an
// estimate too large for 64 bits reads as UINT64_MAX rather than a wrapped-around small number.
constexpr uint64_t kSat = std::numeric_limits<uint64_t>::max();
uint64_t mul(uint64_t a, uint64_t b) {
    uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? kSat : r;
}
uint64_t mul(uint64_t a, uint64_t b, uint64_t c) {
    return mul(mul(a, b), c);
}
uint64_t mul(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return mul(mul(a, b, c), d);
}
void add(uint64_t& acc, uint64_t v) {
    if (__builtin_add_overflow(acc, v, &acc)) acc = kSat;
}

}  // namespace

uint64_t kv_memory::total() const {
    uint64_t t = growing_bytes;
    add(t, raw_window_bytes);
    add(t, frontier_bytes);
    return t;
}

v41_kv_per_token v41_kv_bytes_per_token(const hparams& hp) {
    v41_kv_per_token k;
    k.main_entry_bytes = hp.n_head_dim / 2 + hp.n_head_dim / 16;
    k.index_entry_bytes = hp.n_indexer_head_dim / 2 + hp.n_indexer_head_dim / 32;
    for (uint32_t s : hp.v41.kv_sources) {
        const uint32_t r = hp.compress_ratio(s);
        if (r != 0) k.entries += 1.0 / r;
    }
    return k;
}

namespace {

kv_memory estimate_kv_memory_v41(const hparams& hp, uint64_t ctx, bool with_mtp) {
    kv_memory m;
    const v41_kv_per_token k = v41_kv_bytes_per_token(hp);
    for (uint32_t s : hp.v41.kv_sources) {
        const uint64_t r = hp.compress_ratio(s);
        if (r == 0) continue;
        add(m.growing_bytes, mul(ctx / r, uint64_t{k.main_entry_bytes} + k.index_entry_bytes));
        if (r > 1) add(m.frontier_bytes, mul(r, 2, hp.n_head_dim, 4));  // (a, b) FP32
    }
    const uint64_t window = std::min<uint64_t>(hp.n_swa, ctx);
    const uint64_t n_windows = uint64_t{hp.n_layer} + (with_mtp ? hp.n_dspark() : 0);
    m.raw_window_bytes = mul(n_windows, window, uint64_t{hp.n_head_dim} + hp.n_head_dim / 32);
    return m;
}

}  // namespace

kv_memory estimate_kv_memory(const hparams& hp, uint64_t ctx, uint32_t elem_bytes, bool with_mtp) {
    if (hp.is_v41()) return estimate_kv_memory_v41(hp, ctx, with_mtp);
    kv_memory m;
    const uint64_t hd = hp.n_head_dim;
    const uint64_t id = hp.n_indexer_head_dim;
    const uint64_t e = elem_bytes;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint64_t r = hp.compress_ratio(il);
        if (r != 0) {
            const uint64_t rows = ctx / r;
            add(m.growing_bytes, mul(rows, hd, e));
            const uint64_t c = hparams::coff(static_cast<uint32_t>(r));
            add(m.frontier_bytes, mul(2 * (c * r), c * hd, 4));  // state_kv + state_score, FP32
            if (r == 4) {
                add(m.growing_bytes, mul(rows, id, e));
                add(m.frontier_bytes, mul(2 * (c * r), c * id, 4));
            }
        }
    }
    const uint64_t window = std::min<uint64_t>(hp.n_swa, ctx);
    const uint64_t n_windows = uint64_t{hp.n_layer} + (with_mtp ? 1 : 0);
    m.raw_window_bytes = mul(n_windows, window, hd, e);
    return m;
}

double kv_bytes_per_token(const hparams& hp, uint32_t elem_bytes) {
    if (hp.is_v41()) return v41_kv_bytes_per_token(hp).total();
    double per = 0.0;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint32_t r = hp.compress_ratio(il);
        if (r == 0) continue;
        double w = hp.n_head_dim + (r == 4 ? hp.n_indexer_head_dim : 0);
        per += w / r;
    }
    return per * elem_bytes;
}

}  // namespace magnetar
