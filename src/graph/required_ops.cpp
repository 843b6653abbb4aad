#include "graph/required_ops.h"

namespace magnetar::graph {

std::vector<backend::op_kind> required_ops(const hparams& hp) {
    using backend::op_kind;
    if (hp.is_v41()) {
        return {op_kind::get_rows,     op_kind::copy,          op_kind::fill,
                op_kind::add,          op_kind::matmul,        op_kind::rms_norm,
                op_kind::swiglu,       op_kind::hc_post,       op_kind::kv_store,
                op_kind::router,       op_kind::round_bf16,    op_kind::qdq_rows,
                op_kind::rope41,       op_kind::hc41_pre,      op_kind::hc41_collapse,
                op_kind::compressor41, op_kind::indexer41,     op_kind::attention41,
                op_kind::moe41,        op_kind::engram_gather, op_kind::engram_gate};
    }
    return {op_kind::get_rows,
            op_kind::copy,
            op_kind::fill,
            op_kind::add,
            op_kind::matmul,
            op_kind::rms_norm,
            op_kind::rope_tail,
            op_kind::fp8_kv_roundtrip,
            op_kind::indexer_qat,
            op_kind::swiglu,
            op_kind::hc_pre,
            op_kind::hc_post,
            op_kind::hc_collapse,
            op_kind::kv_store,
            op_kind::compressor,
            op_kind::indexer_topk,
            op_kind::sparse_attention,
            op_kind::router,
            op_kind::moe};
}

}  // namespace magnetar::graph
