// Directional steering in the engine (docs/steering.md): the direction file checked against
// the model and placed on the backend at load, and each session's scales.
#include "model/steering.h"

#include <cmath>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/format.h"
#include "engine/engine_impl.h"

namespace magnetar {

namespace {

constexpr float kMaxScale = 100.0f;

bool valid_scale(float s) {
    return std::isfinite(s) && std::fabs(s) <= kMaxScale;
}

// "0-3,5" for the layers whose row is nonzero.
std::string layer_list(const steering_file& f) {
    std::string out;
    uint32_t il = 0;
    auto nonzero = [&](uint32_t l) {
        const float* v = f.direction(l);
        for (uint32_t i = 0; i < f.n_embd; ++i)
            if (v[i] != 0.0f) return true;
        return false;
    };
    while (il < f.n_layer) {
        if (!nonzero(il)) {
            ++il;
            continue;
        }
        uint32_t end = il;
        while (end + 1 < f.n_layer && nonzero(end + 1)) ++end;
        if (!out.empty()) out += ",";
        out += end == il ? strfmt("%u", il) : strfmt("%u-%u", il, end);
        il = end + 1;
    }
    return out.empty() ? "none" : out;
}

}  // namespace

status load_steering(const engine_options& opts, Engine::impl& p) {
    if (opts.steering_file.empty()) return {};
    if (!valid_scale(opts.steering_ffn) || !valid_scale(opts.steering_attn)) {
        return {status_code::invalid_argument,
                strfmt("steering scales must be in [-100, 100]: ffn %g, attn %g",
                       static_cast<double>(opts.steering_ffn),
                       static_cast<double>(opts.steering_attn))};
    }
    if (!p.be->supports(backend::op_kind::project_out)) {
        return {status_code::unsupported,
                strfmt("backend %s does not implement op project_out (directional steering)",
                       p.be->name())};
    }
    const hparams& hp = p.m->hp();
    steering_file f;
    try {
        f = read_steering_file(opts.steering_file, hp, hp.name);
    } catch (const Error& e) {
        return {status_code::invalid_argument, e.what()};
    }
    const size_t row_bytes = static_cast<size_t>(hp.n_embd) * sizeof(float);
    try {
        p.steer_buffer = p.be->alloc_buffer(row_bytes * hp.n_layer);
        p.steer_dirs.assign(hp.n_layer, tensor{});
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            const float* v = f.direction(il);
            bool zero = true;
            for (uint32_t i = 0; i < hp.n_embd && zero; ++i) zero = v[i] == 0.0f;
            if (zero) continue;
            const tensor t = make_tensor(static_cast<uint8_t*>(p.steer_buffer) + il * row_bytes,
                                         ggml_type::F32, hp.n_embd);
            p.be->upload(t, v);
            p.steer_dirs[il] = t;
        }
        p.be->synchronize();
    } catch (const Error& e) {
        return {status_code::internal, strfmt("steering: %s", e.what())};
    }
    p.info.steering_file = opts.steering_file;
    p.info.steering_fingerprint = steering_fingerprint(f);
    p.info.steering_ffn = opts.steering_ffn;
    p.info.steering_attn = opts.steering_attn;
    std::string desc = strfmt("%s: layers %s", opts.steering_file.c_str(), layer_list(f).c_str());
    if (!f.component.empty()) desc += ", from " + f.component;
    if (f.n_target > 0 || f.n_control > 0) {
        desc += strfmt(", %lld target / %lld control prompts", static_cast<long long>(f.n_target),
                       static_cast<long long>(f.n_control));
    }
    if (!f.has_sidecar) desc += " (no sidecar: only the size was checked)";
    p.info.steering = desc;
    return {};
}

void init_session_steering(const Engine::impl& eng, Session::impl& s) {
    s.steer.directions = eng.steer_dirs;
    s.steer.ffn = eng.steer_dirs.empty() ? 0.0f : eng.info.steering_ffn;
    s.steer.attn = eng.steer_dirs.empty() ? 0.0f : eng.info.steering_attn;
}

status Session::set_steering(const steering_scales& sc) {
    if (!valid_scale(sc.ffn) || !valid_scale(sc.attn)) {
        return {status_code::invalid_argument,
                strfmt("steering scales must be in [-100, 100]: ffn %g, attn %g",
                       static_cast<double>(sc.ffn), static_cast<double>(sc.attn))};
    }
    impl& s = *impl_;
    if (s.steer.directions.empty() && (sc.ffn != 0.0f || sc.attn != 0.0f)) {
        return {status_code::invalid_argument,
                "steering scales given but the engine was loaded without a steering file"};
    }
    if (sc.ffn == s.steer.ffn && sc.attn == s.steer.attn) return {};
    reset();
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    s.steer.ffn = sc.ffn;
    s.steer.attn = sc.attn;
    return {};
}

steering_scales Session::steering() const {
    return {impl_->steer.ffn, impl_->steer.attn};
}

}  // namespace magnetar
