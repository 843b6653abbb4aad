#include "cli/engine_flags.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "cli/log.h"
#include "core/format.h"

namespace magnetar::cli {

void add_backend_flags(CLI::App& sub, engine_flags& f) {
    sub.add_option("--backend", f.backend,
                   "Compute backend: cpu or cuda (default: $MAGNETAR_BACKEND, else cpu)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    sub.add_option("--device", f.device, "GPU ordinal of --backend cuda")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub.add_option("--n-gpu-layers", f.n_gpu_layers,
                   "(also -ngl) 0 runs on the CPU, N > 0 on the GPU (the whole model: "
                   "there is no partial offload)")
        ->check(CLI::Range(0, 100000));
    sub.add_flag("--no-mmap", f.no_mmap,
                 "Read the whole model file into memory at load instead of mapping it (slower "
                 "start; no page faults on the file afterwards)");
    sub.add_flag("--mlock", f.mlock,
                 "Lock the weights in RAM so that they are never paged out (a refused lock is "
                 "a warning; see `ulimit -l`)");
}

void add_pipeline_flags(CLI::App& sub, engine_flags& f) {
    sub.add_option("--layers", f.layers,
                   "Under mpirun: layers per rank, 'auto' (balance weight bytes) or one range "
                   "or count per rank ('0:3,3:8' or '3,5')")
        ->capture_default_str();
    sub.add_flag("--wire-f32", f.f32,
                 "Under mpirun: send the HC state between stages as F32 (default BF16)");
    sub.add_option("--pipeline-chunk", f.chunk, "Under mpirun: tokens per pipelined prefill chunk")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
}

void add_mtp_flags(CLI::App& sub, engine_flags& f) {
    auto* mtp = sub.add_option("--mtp", f.mtp,
                               "Separate MTP GGUF (published layout; default: the model's own "
                               "MTP block, if any)");
    auto* no_mtp =
        sub.add_flag("--no-mtp", f.no_mtp, "Do not run the MTP block, even when the model has one");
    auto* draft = sub.add_option("--mtp-draft", f.mtp_draft,
                                 "MTP drafting: 0 off, 1 draft and report agreement only, N >= 2 "
                                 "speculate up to N tokens a step (greedy and sampled output "
                                 "unchanged)")
                      ->capture_default_str()
                      ->check(CLI::Range(0, 16));
    sub.add_option("--mtp-margin", f.mtp_margin,
                   "Stop drafting before a draft whose MTP top-1 minus top-2 logit is below this")
        ->capture_default_str()
        ->check(CLI::Range(0.0f, 1000.0f));
    no_mtp->excludes(mtp)->excludes(draft);
}

void check_mtp_flags(const engine_flags& f, const model_info& info) {
    if (f.mtp_draft == 0) return;
    if (info.arch == "deepseek41") {
        if (!info.has_dspark) {
            throw std::runtime_error(info.path +
                                     ": --mtp-draft needs DSpark draft stages: the model has none");
        }
        if (f.mtp_draft == 1) {
            throw std::runtime_error(
                "--mtp-draft 1 compares MTP drafts, a DeepSeek V4 mode; DeepSeek V4.1 speculates "
                "with its DSpark stages at 2 or more");
        }
    } else if (!info.has_mtp) {
        throw std::runtime_error(
            info.path + ": --mtp-draft needs an MTP block: the model has none (add --mtp FILE)");
    }
    if (f.mtp_draft >= 2 && info.n_stages > 1) {
        throw std::runtime_error("--mtp-draft 2 or more does not run across a pipeline yet");
    }
}

void add_steering_flags(CLI::App& sub, engine_flags& f) {
    auto* file = sub.add_option("--dir-steering-file", f.steer_file,
                                "Directional steering: a direction file (one unit vector per "
                                "layer, F32, with its .json sidecar; `magnetar steer build`)");
    sub.add_option("--dir-steering-ffn", f.steer_ffn,
                   "Steering scale after each layer's FFN output: y -= S v (v.y); positive "
                   "removes the direction, negative amplifies it")
        ->capture_default_str()
        ->check(CLI::Range(-100.0f, 100.0f))
        ->needs(file);
    sub.add_option("--dir-steering-attn", f.steer_attn,
                   "Steering scale after each layer's attention output (more fragile)")
        ->capture_default_str()
        ->check(CLI::Range(-100.0f, 100.0f))
        ->needs(file);
}

void add_engine_flags(CLI::App& sub, engine_flags& f) {
    add_backend_flags(sub, f);
    add_pipeline_flags(sub, f);
}

void apply_engine_flags(const engine_flags& f, engine_options& eo) {
    eo.backend = f.backend;
    if (f.n_gpu_layers >= 0) {
        const std::string want = f.n_gpu_layers > 0 ? "cuda" : "cpu";
        if (!f.backend.empty() && f.backend != want) {
            throw std::runtime_error(strfmt("-ngl %d asks for the %s but --backend is %s",
                                            f.n_gpu_layers, f.n_gpu_layers > 0 ? "GPU" : "CPU",
                                            f.backend.c_str()));
        }
        eo.backend = want;
        if (f.n_gpu_layers > 0) {
            engine_options probe;
            probe.backend = "cuda";
            probe.device = f.device;
            std::string desc;
            const status st = Engine::probe_backend(probe, &desc);
            if (!st.ok()) {
                throw std::runtime_error(
                    strfmt("-ngl %d asks for the GPU, but %s; -ngl 0 (or no -ngl) runs on the CPU",
                           f.n_gpu_layers, st.message().c_str()));
            }
        }
    }
    if (eo.backend.empty()) {
        const char* env = std::getenv("MAGNETAR_BACKEND");
        eo.backend = env && *env ? env : "cpu";
    }
    eo.device = f.device;
    eo.use_mmap = !f.no_mmap;
    eo.use_mlock = f.mlock;
    eo.quiet = !log_notes();
    eo.pipeline_layers = f.layers;
    eo.pipeline_f32 = f.f32;
    eo.pipeline_chunk = f.chunk;
    if (!f.mtp.empty()) eo.mtp_path = f.mtp;
    eo.use_mtp = !f.no_mtp;
    eo.steering_file = f.steer_file;
    eo.steering_ffn = f.steer_ffn;
    eo.steering_attn = f.steer_attn;
}

void report_engine(const model_info& info) {
    detail(
        "magnetar: model %s: %s (%s), %u layers, width %u, vocabulary %u, trained context "
        "%llu, %s of weights\n",
        info.path.c_str(), info.name.empty() ? "(unnamed)" : info.name.c_str(), info.arch.c_str(),
        info.n_layer, info.n_embd, info.n_vocab, static_cast<unsigned long long>(info.n_ctx_train),
        human_bytes(info.weight_bytes).c_str());
    detail("magnetar: weights %s%s; %s%s\n",
           info.weights_mapped ? "mapped from the file" : "read into memory",
           info.weights_locked ? ", locked in RAM" : "",
           info.has_mtp      ? "MTP block"
           : info.has_dspark ? "DSpark stages"
                             : "no draft block",
           info.has_tokenizer ? ", tokenizer" : ", no tokenizer");
    detail("magnetar: backend %s\n", info.device.c_str());
    if (!info.lock_warning.empty()) {
        note("magnetar: warning: --mlock: %s; the weights stay loaded but may be paged out\n",
             info.lock_warning.c_str());
    }
    if (info.backend != "cpu") {
        note("magnetar: backend %s: %s, %s of weights copied in %.1f s", info.backend.c_str(),
             info.device.c_str(), human_bytes(info.device_weight_bytes).c_str(),
             info.weight_upload_seconds);
        if (info.weight_upload_seconds > 0) {
            note(" (%.1f GB/s)",
                 static_cast<double>(info.device_weight_bytes) / info.weight_upload_seconds / 1e9);
        }
        note("\n");
    }
    if (info.n_stages > 1) note("magnetar: pipeline of %s\n", info.pipeline.c_str());
    if (!info.steering_file.empty()) {
        note("magnetar: steering %s; scales ffn %g, attn %g\n", info.steering.c_str(),
             static_cast<double>(info.steering_ffn), static_cast<double>(info.steering_attn));
    }
}

}  // namespace magnetar::cli
