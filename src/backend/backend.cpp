#include "backend/backend.h"

#include <string>

#include "core/error.h"
#include "core/host.h"

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
        case op_kind::project_out:
            return "project_out";
        case op_kind::round_bf16:
            return "round_bf16";
        case op_kind::qdq_rows:
            return "qdq_rows";
        case op_kind::rope41:
            return "rope41";
        case op_kind::hc41_pre:
            return "hc41_pre";
        case op_kind::hc41_collapse:
            return "hc41_collapse";
        case op_kind::compressor41:
            return "compressor41";
        case op_kind::indexer41:
            return "indexer41";
        case op_kind::attention41:
            return "attention41";
        case op_kind::moe41:
            return "moe41";
        case op_kind::engram_gather:
            return "engram_gather";
        case op_kind::engram_gate:
            return "engram_gate";
    }
    return "?";
}

memory_info backend::memory() const {
    memory_info m;
    m.host = true;
    m.total = host_memory_bytes();
    m.available = m.total;
    m.where = "host";
    return m;
}

void backend::place_weights(const std::vector<weight_region>&, bool) {}

std::vector<op_kind> missing_ops(const backend& be, const std::vector<op_kind>& ops) {
    std::vector<op_kind> out;
    for (op_kind op : ops) {
        if (!be.supports(op)) out.push_back(op);
    }
    return out;
}

namespace {

[[noreturn]] void unsupported(const backend& be, op_kind op) {
    throw Error(std::string("backend '") + be.name() + "' does not implement op " + op_name(op));
}

}  // namespace

void backend::round_bf16(const tensor&) {
    unsupported(*this, op_kind::round_bf16);
}
void backend::qdq_rows(const tensor&, qdq_format, const tensor&) {
    unsupported(*this, op_kind::qdq_rows);
}
void backend::rope41(const tensor&, uint32_t, const rope41_params&, int64_t, int64_t, bool) {
    unsupported(*this, op_kind::rope41);
}
void backend::hc41_pre(const hc_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                       const tensor&, const tensor&, const tensor&, const tensor&, const tensor&,
                       const tensor&) {
    unsupported(*this, op_kind::hc41_pre);
}
void backend::hc41_collapse(const hc_params&, const tensor&, const tensor&, const tensor&) {
    unsupported(*this, op_kind::hc41_collapse);
}
void backend::compressor41(const compressor41_params&, const tensor&, const tensor&, const tensor&,
                           const tensor&, const tensor&) {
    unsupported(*this, op_kind::compressor41);
}
void backend::indexer41(const indexer41_params&, const tensor&, const tensor&, const tensor&,
                        const tensor&, const tensor&, const tensor&) {
    unsupported(*this, op_kind::indexer41);
}
void backend::attention41(const attention41_params&, const tensor&, const tensor&, const tensor&,
                          const tensor&, const tensor&, const tensor&, const tensor&) {
    unsupported(*this, op_kind::attention41);
}
void backend::moe41(const tensor&, const tensor&, const tensor&, const moe_weights&, float,
                    const tensor&, const moe_workspace&) {
    unsupported(*this, op_kind::moe41);
}
void backend::engram_gather(const tensor&, const tensor&, const tensor&) {
    unsupported(*this, op_kind::engram_gather);
}
void backend::engram_gate(const engram_params&, const tensor&, const tensor&, const tensor&,
                          const tensor&) {
    unsupported(*this, op_kind::engram_gate);
}

}  // namespace magnetar::backend
