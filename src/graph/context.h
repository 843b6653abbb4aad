// Internal to src/graph: the state one chunk's sub-layer functions share, and their
// declarations. Not used outside the forward pass.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "core/arena.h"
#include "graph/forward.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace magnetar::graph {

// Tensor over a bound weight's bytes (an empty tensor for an absent optional weight).
tensor weight_tensor(const weight& w);

// Hands t [n, width] (F32, or I32 written as floats) to the dump sink under `name` when wanted.
void tap_rows(backend::backend& be, dump_sink* dump, const std::string& name, int64_t p0,
              const tensor& t);

struct chunk_ctx {
    chunk_ctx(backend::backend& b, const hparams& h, arena& a) : be(b), hp(h), ar(a) {}

    backend::backend& be;
    const hparams& hp;
    arena& ar;
    int64_t p0 = 0;  // position of row 0
    int64_t n = 0;   // rows
    tensor ids;      // [n] I32 token ids of the rows
    dump_sink* dump = nullptr;
    std::string prefix;  // "blk.3." or "mtp." (set per layer while dumping)
    // Directional steering of the current layer (set per layer; zero scales: none).
    tensor steer_v;  // [D] F32
    float steer_attn = 0.0f;
    float steer_ffn = 0.0f;

    // Hands t [n, width] to the dump sink when prefix + what is wanted.
    void tap(const tensor& t, const char* what) const;
};

backend::rope_params rope_for(const hparams& hp, uint32_t ratio);
backend::hc_params hc_for(const hparams& hp);

// Sets c's steering fields for main layer il from req.steer (clears them when not steered).
void set_layer_steering(chunk_ctx& c, const steering* steer, uint32_t il);

// One transformer block: x [n, n_hc*D] is updated in place; t is scratch of the same shape.
void layer(const chunk_ctx& c, const layer_weights& lw, kv::layer_state& st, const tensor& x,
           const tensor& t);

// Attention sub-layer (spec §5.3): input the normed sub-layer input [n, D], output [n, D].
// Updates the layer's raw ring, compressed rows and compressor frontiers.
tensor attention(const chunk_ctx& c, const layer_weights& lw, kv::layer_state& st, const tensor& x);

// MoE FFN sub-layer (spec §5.5): input [n, D], output routed + shared [n, D].
tensor ffn(const chunk_ctx& c, const layer_weights& lw, const tensor& x);

}  // namespace magnetar::graph
