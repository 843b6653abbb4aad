// A backend that executes nothing.
//
// Owns: nothing. The session runs the forward pass once against it, with a measuring arena, to
// learn the scratch size of the largest batch before the first real evaluation (no tensor it
// sees has data). Every op is a no-op; supports() says yes to everything.
#pragma once

#include "backend/backend.h"

namespace magnetar::backend {

class null_backend final : public backend {
  public:
    const char* name() const override { return "null"; }
    bool supports(op_kind) const override { return true; }
    void* alloc_buffer(size_t) override { return nullptr; }
    void free_buffer(void*) override {}
    void reserve(const limits&) override {}
    uint64_t reserve_bytes(const limits&) const override { return 0; }
    void upload(const tensor&, const void*) override {}
    void download(const tensor&, void*) override {}
    void synchronize() override {}
    void get_rows(const tensor&, const tensor&, const tensor&, int) override {}
    void copy(const tensor&, const tensor&) override {}
    void fill(const tensor&, float) override {}
    void add(const tensor&, const tensor&, const tensor&, int) override {}
    void swiglu(const tensor&, const tensor&, const tensor&, float) override {}
    void matmul(const tensor&, const tensor&, const tensor&) override {}
    void rms_norm(const tensor&, const tensor&, const tensor&, uint32_t, float) override {}
    void rope_tail(const tensor&, uint32_t, const rope_params&, int64_t, bool) override {}
    void fp8_kv_roundtrip(const tensor&, uint32_t) override {}
    void indexer_qat(const tensor&, uint32_t) override {}
    void hc_pre(const hc_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                const tensor&, const tensor&, const tensor&, const tensor&) override {}
    void hc_post(const hc_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                 const tensor&) override {}
    void hc_collapse(const hc_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                     const tensor&, const tensor&) override {}
    void kv_store(const tensor&, const tensor&, int64_t) override {}
    void compressor(const compressor_params&, const tensor&, const tensor&, const tensor&,
                    const tensor&, const tensor&, const tensor&, const tensor&) override {}
    void indexer_topk(const indexer_params&, const tensor&, const tensor&, const tensor&,
                      const tensor&) override {}
    void sparse_attention(const attention_params&, const tensor&, const tensor&, const tensor&,
                          const tensor&, const tensor&, const tensor&, const tensor&) override {}
    void router(const router_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                const tensor&, const tensor&) override {}
    void moe(const tensor&, const tensor&, const tensor&, const moe_weights&, float, const tensor&,
             const moe_workspace&) override {}
    void project_out(const tensor&, const tensor&, float) override {}
    void round_bf16(const tensor&) override {}
    void qdq_rows(const tensor&, qdq_format, const tensor&) override {}
    void rope41(const tensor&, uint32_t, const rope41_params&, int64_t, int64_t, bool) override {}
    void hc41_pre(const hc_params&, const tensor&, const tensor&, const tensor&, const tensor&,
                  const tensor&, const tensor&, const tensor&, const tensor&, const tensor&,
                  const tensor&) override {}
    void hc41_collapse(const hc_params&, const tensor&, const tensor&, const tensor&) override {}
    void compressor41(const compressor41_params&, const tensor&, const tensor&, const tensor&,
                      const tensor&, const tensor&) override {}
    void indexer41(const indexer41_params&, const tensor&, const tensor&, const tensor&,
                   const tensor&, const tensor&, const tensor&) override {}
    void attention41(const attention41_params&, const tensor&, const tensor&, const tensor&,
                     const tensor&, const tensor&, const tensor&, const tensor&) override {}
    void moe41(const tensor&, const tensor&, const tensor&, const moe_weights&, float,
               const tensor&, const moe_workspace&) override {}
    void engram_gather(const tensor&, const tensor&, const tensor&) override {}
    void engram_gate(const engram_params&, const tensor&, const tensor&, const tensor&,
                     const tensor&) override {}
};

}  // namespace magnetar::backend
