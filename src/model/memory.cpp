#include "model/memory.h"

#include <algorithm>

namespace magnetar {

kv_memory estimate_kv_memory(const hparams& hp, uint64_t ctx, uint32_t elem_bytes, bool with_mtp) {
    kv_memory m;
    const uint64_t hd = hp.n_head_dim;
    const uint64_t id = hp.n_indexer_head_dim;
    const uint64_t e = elem_bytes;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint64_t r = hp.compress_ratio(il);
        if (r != 0) {
            const uint64_t rows = ctx / r;
            m.growing_bytes += rows * hd * e;
            const uint64_t c = hparams::coff(static_cast<uint32_t>(r));
            m.frontier_bytes += 2 * (c * r) * (c * hd) * 4;  // state_kv + state_score, FP32
            if (r == 4) {
                m.growing_bytes += rows * id * e;
                m.frontier_bytes += 2 * (c * r) * (c * id) * 4;
            }
        }
    }
    const uint64_t window = std::min<uint64_t>(hp.n_swa, ctx);
    const uint64_t n_windows = hp.n_layer + (with_mtp ? 1 : 0);
    m.raw_window_bytes = n_windows * window * hd * e;
    return m;
}

double kv_bytes_per_token(const hparams& hp, uint32_t elem_bytes) {
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
