#include "kv/cache41.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/arena.h"
#include "core/error.h"
#include "quant/fp8fp4.h"

namespace magnetar::kv {

namespace {

// Zeroes a tensor of packed rows (any byte width) through the backend.
void zero_rows(backend::backend& be, const tensor& t) {
    const std::vector<uint8_t> zeros(tensor_bytes(t.type, t.ne[0], t.n_rows()), 0);
    be.upload(t, zeros.data());
}

void layout(arena& a, const hparams& hp, int64_t n_ctx, uint32_t n_blocks,
            std::vector<layer41_state>& layers, usage41& u) {
    const int64_t dh = hp.n_head_dim;
    const int64_t di = hp.n_indexer_head_dim;
    const int64_t w = hp.n_swa;
    auto take = [&](uint64_t& cat, ggml_type t, int64_t ne0, int64_t ne1) {
        tensor x = a.alloc(t, ne0, ne1);
        cat += tensor_bytes(t, ne0, ne1);
        return x;
    };
    layers.assign(n_blocks, layer41_state{});
    for (uint32_t il = 0; il < n_blocks; ++il) {
        layer41_state& s = layers[il];
        s.ratio = hp.compress_ratio(il);
        s.ring = take(u.window_bytes, ggml_type::I8, quant::window_row_bytes(dh), w);
        if (il >= hp.n_layer || !hp.is_kv_source(il)) continue;
        const int64_t r = s.ratio;
        s.comp_rows = take(u.global_bytes, ggml_type::I8, quant::main_kv_row_bytes(dh), n_ctx / r);
        s.idx_rows = take(u.global_bytes, ggml_type::I8, quant::index_key_row_bytes(di), n_ctx / r);
        if (r >= 2) {
            s.state_a = take(u.pending_bytes, ggml_type::F32, dh, r);
            s.state_b = take(u.pending_bytes, ggml_type::F32, dh, r);
        }
    }
}

}  // namespace

double global_kv_bytes_per_token(const hparams& hp) {
    double b = 0.0;
    for (uint32_t s : hp.v41.kv_sources) {
        const double r = hp.compress_ratio(s);
        b += static_cast<double>(quant::main_kv_row_bytes(hp.n_head_dim) +
                                 quant::index_key_row_bytes(hp.n_indexer_head_dim)) /
             r;
    }
    return b;
}

uint64_t cache41::buffer_bytes(const hparams& hp, int64_t n_ctx, bool with_dspark) {
    const uint32_t n_blocks = hp.n_layer + (with_dspark ? hp.n_dspark() : 0);
    arena probe = arena::measuring();
    std::vector<layer41_state> layers;
    usage41 ignored;
    layout(probe, hp, n_ctx, n_blocks, layers, ignored);
    return probe.peak() + static_cast<uint64_t>(n_ctx) * sizeof(int64_t);
}

cache41::cache41(backend::backend& be, const hparams& hp, int64_t n_ctx, bool with_dspark)
    : be_(be), n_ctx_(n_ctx) {
    MAGNETAR_ASSERT(hp.is_v41() && n_ctx > 0, "cache41: a V4.1 model and n_ctx > 0");
    const uint32_t n_blocks = hp.n_layer + (with_dspark ? hp.n_dspark() : 0);
    arena probe = arena::measuring();
    usage41 ignored;
    layout(probe, hp, n_ctx, n_blocks, layers_, ignored);
    buffer_ = be_.alloc_buffer(probe.peak());
    arena real(buffer_, probe.peak());
    layout(real, hp, n_ctx, n_blocks, layers_, usage_);
    engram_history_.reserve(static_cast<size_t>(n_ctx));
    usage_.engram_bytes = static_cast<uint64_t>(n_ctx) * sizeof(int64_t);
    usage_.global_bytes_per_token = global_kv_bytes_per_token(hp);
    for (const layer41_state& s : layers_) {
        small_.push_back(s.ring);
        if (s.state_a) {
            small_.push_back(s.state_a);
            small_.push_back(s.state_b);
        }
    }
    for (const tensor& t : small_) {
        small_bytes_ += tensor_bytes(t.type, t.ne[0], t.n_rows());
    }
    clear();
}

cache41::~cache41() {
    be_.free_buffer(buffer_);
}

void cache41::clear() {
    for (layer41_state& s : layers_) {
        if (!s.comp_rows) continue;
        zero_rows(be_, s.comp_rows);
        zero_rows(be_, s.idx_rows);
    }
    clear_small();
}

void cache41::clear_small() {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (layer41_state& s : layers_) {
        zero_rows(be_, s.ring);
        if (s.state_a) {
            be_.fill(s.state_a, 0.0f);
            be_.fill(s.state_b, neg_inf);
        }
    }
    engram_history_.clear();
    runtime_ = attention_runtime{};
}

void cache41::save_small(std::vector<uint8_t>& out) const {
    out.resize(small_bytes_ + sizeof(int32_t));
    uint8_t* p = out.data();
    for (const tensor& t : small_) {
        be_.download(t, p);
        p += tensor_bytes(t.type, t.ne[0], t.n_rows());
    }
    std::memcpy(p, &runtime_.published_index_k, sizeof(int32_t));
}

void cache41::load_small(const std::vector<uint8_t>& in) {
    MAGNETAR_ASSERT(in.size() == small_bytes_ + sizeof(int32_t), "cache41: small state size");
    const uint8_t* p = in.data();
    for (const tensor& t : small_) {
        be_.upload(t, p);
        p += tensor_bytes(t.type, t.ne[0], t.n_rows());
    }
    std::memcpy(&runtime_.published_index_k, p, sizeof(int32_t));
}

}  // namespace magnetar::kv
