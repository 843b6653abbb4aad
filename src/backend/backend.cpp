#include "backend/backend.h"

namespace magnetar::backend {

const char* op_name(op_kind op) {
    switch (op) {
        case op_kind::get_rows:
            return "get_rows";
        case op_kind::copy:
            return "copy";
        case op_kind::fill:
            return "fill";
        case op_kind::add:
            return "add";
        case op_kind::matmul:
            return "matmul";
        case op_kind::rms_norm:
            return "rms_norm";
        case op_kind::rope_tail:
            return "rope_tail";
        case op_kind::fp8_kv_roundtrip:
            return "fp8_kv_roundtrip";
        case op_kind::indexer_qat:
            return "indexer_qat";
        case op_kind::swiglu:
            return "swiglu";
        case op_kind::hc_pre:
            return "hc_pre";
        case op_kind::hc_post:
            return "hc_post";
        case op_kind::hc_collapse:
            return "hc_collapse";
        case op_kind::kv_store:
            return "kv_store";
        case op_kind::compressor:
            return "compressor";
        case op_kind::indexer_topk:
            return "indexer_topk";
        case op_kind::sparse_attention:
            return "sparse_attention";
        case op_kind::router:
            return "router";
        case op_kind::moe:
            return "moe";
    }
    return "?";
}

}  // namespace magnetar::backend
