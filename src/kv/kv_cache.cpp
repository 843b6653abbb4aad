#include "kv/kv_cache.h"

#include <algorithm>
#include <limits>

#include "core/arena.h"
#include "core/error.h"

namespace magnetar::kv {

namespace {

// Lays the state out with `a` (a measuring arena first, then the real one) and adds the bytes
// of each tensor to its category.
void layout(arena& a, const hparams& hp, int64_t n_ctx, bool with_mtp, uint32_t l0, uint32_t l1,
            std::vector<layer_state>& layers, tensor& mtp_prev_hc, usage& u) {
    const int64_t hd = hp.n_head_dim;
    const int64_t id = hp.n_indexer_head_dim;
    const int64_t raw_cap = std::min<int64_t>(hp.n_swa, n_ctx);
    auto take = [&](uint64_t& cat, int64_t ne0, int64_t ne1) {
        tensor t = a.alloc_f32(ne0, ne1);
        cat += tensor_bytes(ggml_type::F32, ne0, ne1);
        return t;
    };
    const uint32_t n_states = hp.n_layer + (with_mtp ? 1 : 0);
    layers.assign(n_states, layer_state{});
    for (uint32_t il = 0; il < n_states; ++il) {
        layer_state& s = layers[il];
        s.ratio = hp.compress_ratio(il);
        if (il < hp.n_layer && (il < l0 || il >= l1)) continue;  // another stage's layer
        s.raw = take(u.raw_window_bytes, hd, raw_cap);           // [raw_cap, hd]
        if (s.ratio == 0) continue;
        const int64_t c = hparams::coff(s.ratio);
        const int64_t r = s.ratio;
        s.comp_rows = take(u.growing_bytes, hd, n_ctx / r);  // [n_ctx/ratio, hd]
        s.comp_kv = take(u.frontier_bytes, c * hd, c * r);   // [coff*ratio, coff*hd]
        s.comp_score = take(u.frontier_bytes, c * hd, c * r);
        if (s.ratio == 4) {
            s.idx_rows = take(u.growing_bytes, id, n_ctx / 4);  // [n_ctx/4, Id]
            s.idx_kv = take(u.frontier_bytes, 2 * id, 8);       // [8, 2*Id]
            s.idx_score = take(u.frontier_bytes, 2 * id, 8);
        }
    }
    if (with_mtp)
        mtp_prev_hc = take(u.mtp_state_bytes, static_cast<int64_t>(hp.n_hc) * hp.n_embd, 1);
}

}  // namespace

uint64_t cache::buffer_bytes(const hparams& hp, int64_t n_ctx, bool with_mtp, uint32_t layer_begin,
                             uint32_t layer_end) {
    const uint32_t l0 = std::min(layer_begin, hp.n_layer);
    const uint32_t l1 = std::min(layer_end, hp.n_layer);
    if (l1 != hp.n_layer) with_mtp = false;
    arena probe = arena::measuring();
    std::vector<layer_state> layers;
    tensor mtp_prev_hc;
    usage ignored;
    layout(probe, hp, n_ctx, with_mtp, l0, l1, layers, mtp_prev_hc, ignored);
    return probe.peak();
}

cache::cache(backend::backend& be, const hparams& hp, int64_t n_ctx, bool with_mtp,
             uint32_t layer_begin, uint32_t layer_end)
    : be_(be),
      n_ctx_(n_ctx),
      with_mtp_(with_mtp),
      layer_begin_(std::min(layer_begin, hp.n_layer)),
      layer_end_(std::min(layer_end, hp.n_layer)) {
    MAGNETAR_ASSERT(layer_begin_ < layer_end_, "kv cache: empty layer range");
    // The MTP block runs after the head, on the stage that holds the last layer.
    if (layer_end_ != hp.n_layer) with_mtp_ = false;
    arena probe = arena::measuring();
    usage ignored;
    layout(probe, hp, n_ctx, with_mtp_, layer_begin_, layer_end_, layers_, mtp_prev_hc_, ignored);
    buffer_ = be_.alloc_buffer(probe.peak());
    arena real(buffer_, probe.peak());
    layout(real, hp, n_ctx, with_mtp_, layer_begin_, layer_end_, layers_, mtp_prev_hc_, usage_);
    for (const layer_state& s : layers_) {
        if (!s.raw) continue;  // held by another stage
        small_.push_back(s.raw);
        if (s.ratio == 0) continue;
        small_.push_back(s.comp_kv);
        small_.push_back(s.comp_score);
        if (s.ratio == 4) {
            small_.push_back(s.idx_kv);
            small_.push_back(s.idx_score);
        }
    }
    if (mtp_prev_hc_) small_.push_back(mtp_prev_hc_);
    for (const tensor& t : small_) small_floats_ += static_cast<uint64_t>(t.n_elements());
    clear();
}

cache::~cache() {
    be_.free_buffer(buffer_);
}

void cache::clear() {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (layer_state& s : layers_) {
        if (!s.raw) continue;  // held by another stage
        be_.fill(s.raw, 0.0f);
        if (s.ratio == 0) continue;
        be_.fill(s.comp_rows, 0.0f);
        be_.fill(s.comp_kv, 0.0f);
        be_.fill(s.comp_score, neg_inf);
        if (s.ratio == 4) {
            be_.fill(s.idx_rows, 0.0f);
            be_.fill(s.idx_kv, 0.0f);
            be_.fill(s.idx_score, neg_inf);
        }
    }
    if (mtp_prev_hc_) be_.fill(mtp_prev_hc_, 0.0f);
}

void cache::clear_small() {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (layer_state& s : layers_) {
        if (!s.raw) continue;  // held by another stage
        be_.fill(s.raw, 0.0f);
        if (s.ratio == 0) continue;
        be_.fill(s.comp_kv, 0.0f);
        be_.fill(s.comp_score, neg_inf);
        if (s.ratio == 4) {
            be_.fill(s.idx_kv, 0.0f);
            be_.fill(s.idx_score, neg_inf);
        }
    }
    if (mtp_prev_hc_) be_.fill(mtp_prev_hc_, 0.0f);
}

void cache::save_small(std::vector<float>& out) const {
    out.resize(small_floats_);
    float* p = out.data();
    for (const tensor& t : small_) {
        be_.download(t, p);
        p += t.n_elements();
    }
}

void cache::load_small(const std::vector<float>& in) {
    MAGNETAR_ASSERT(in.size() == small_floats_, "load_small: state of another cache shape");
    const float* p = in.data();
    for (const tensor& t : small_) {
        be_.upload(t, p);
        p += t.n_elements();
    }
}

}  // namespace magnetar::kv
