// Engine: loads and validates the model once, owns the compute backend, creates sessions.
#include <algorithm>
#include <chrono>
#include <new>

#include "chat/renderer.h"
#include "core/error.h"
#include "core/format.h"
#include "core/thread_pool.h"
#include "dist/comm.h"
#include "engine/backend_factory.h"
#include "engine/engine_impl.h"
#include "graph/forward41.h"
#include "graph/required_ops.h"
#include "kv/cache41.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar {

namespace {

// The tensor-data sections of the model's files (the main file and a separate MTP file).
std::vector<backend::weight_region> weight_regions(const model& m) {
    std::vector<backend::weight_region> out;
    auto add = [&](const gguf::reader& f) {
        if (f.tensors().empty()) return;
        const gguf::tensor_info& t0 = f.tensors().front();
        backend::weight_region r;
        r.data = f.tensor_data(t0) - t0.offset;
        r.bytes = f.file_size() - f.data_offset();
        r.label = f.path();
        out.push_back(std::move(r));
    };
    add(m.file());
    if (m.mtp_file() && m.mtp_file() != &m.file()) add(*m.mtp_file());
    return out;
}

backend_choice choice_of(const engine_options& opts) {
    backend_choice bc;
    bc.name = opts.backend;
    bc.device = opts.device;
    bc.n_threads = opts.n_threads > 0 ? opts.n_threads : thread_pool::physical_cores();
    bc.reference_kernels = opts.reference_kernels;
    bc.exact_matmul = opts.exact_matmul;
    bc.quiet = opts.quiet;
    return bc;
}

}  // namespace

Engine::impl::~impl() {
    if (be && steer_buffer) be->free_buffer(steer_buffer);
    if (be && batch_buffer) be->free_buffer(batch_buffer);
}

Engine::Engine(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
Engine::~Engine() = default;

const model_info& Engine::info() const {
    return impl_->info;
}

status Engine::probe_backend(const engine_options& opts, std::string* description) {
    try {
        const std::unique_ptr<backend::backend> be = make_backend(choice_of(opts));
        if (description) *description = be->description();
    } catch (const Error& e) {
        return {status_code::unsupported, e.what()};
    }
    return {};
}

status Engine::load(const engine_options& opts, std::unique_ptr<Engine>* out) {
    auto p = std::make_unique<impl>();
    try {
        if (dist::active() && (!opts.use_mmap || opts.use_mlock)) {
            return {status_code::unsupported,
                    "reading the model into memory or locking it is not available in pipelined "
                    "(MPI) runs: each rank maps the file and touches only its own layers"};
        }
        load_options lo;
        lo.mtp_path = opts.mtp_path;
        lo.mmap = opts.use_mmap;
        lo.mlock = opts.use_mlock;
        lo.quiet = opts.quiet;
        p->m = model::load(opts.model_path, lo);
    } catch (const Error& e) {
        return {status_code::model_error, e.what()};
    } catch (const std::exception& e) {
        return {status_code::model_error, e.what()};
    }
    const hparams& hp = p->m->hp();
    if (!hp.is_v41() && hp.n_expert_group > 1) {
        return {
            status_code::model_error,
            strfmt("%s: grouped expert routing (expert_group_count %u) is not part of DeepSeek V4",
                   opts.model_path.c_str(), hp.n_expert_group)};
    }
    const backend_choice bc = choice_of(opts);
    const int n_threads = bc.n_threads;
    if (dist::active() && opts.backend != "cpu") {
        return {status_code::unsupported,
                strfmt("backend %s: pipelined (MPI) runs use the CPU backend on every rank",
                       opts.backend.c_str())};
    }
    try {
        p->be = make_backend(bc);
    } catch (const Error& e) {
        return {status_code::unsupported, e.what()};
    }
    // Every op the architecture's forward pass calls, before any weight is placed.
    const std::vector<backend::op_kind> missing =
        backend::missing_ops(*p->be, graph::required_ops(hp));
    if (!missing.empty()) {
        std::string names;
        for (backend::op_kind op : missing)
            names += (names.empty() ? "" : ", ") + std::string(backend::op_name(op));
        return {
            status_code::unsupported,
            strfmt("backend %s does not implement %zu op%s that %s (%s) models need: %s",
                   p->be->name(), missing.size(), missing.size() == 1 ? "" : "s",
                   hp.is_v41() ? "DeepSeek V4.1" : "DeepSeek V4", hp.arch.c_str(), names.c_str())};
    }
    try {
        const auto t0 = std::chrono::steady_clock::now();
        p->be->place_weights(weight_regions(*p->m), opts.quiet);
        p->info.weight_upload_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (const Error& e) {
        return {status_code::model_error, e.what()};
    } catch (const std::bad_alloc&) {
        return {status_code::model_error, "out of host memory while placing the weights"};
    }
    p->info.backend = p->be->name();
    p->info.device = p->be->description();
    p->info.device_weight_bytes = p->be->placed_weight_bytes();
    if (p->m->file().find("tokenizer.ggml.tokens")) {
        try {
            p->vocab = tokenizer::from_gguf(p->m->file());
        } catch (const Error& e) {
            return {status_code::model_error, e.what()};
        }
        if (static_cast<uint32_t>(p->vocab->n_vocab()) > hp.n_vocab) {
            return {status_code::model_error,
                    strfmt("%s: the tokenizer has %d tokens, the model's vocabulary %u",
                           opts.model_path.c_str(), p->vocab->n_vocab(), hp.n_vocab)};
        }
        p->lits = std::make_unique<special_literals>(*p->vocab);
        const tokenizer::special_ids& sp = p->vocab->specials();
        p->info.has_tokenizer = true;
        p->info.special = {sp.bos, sp.eos, sp.user, sp.assistant, sp.think, sp.think_end};
    }
    for (const gguf::tensor_info& t : p->m->file().tensors()) p->info.weight_bytes += t.n_bytes;
    p->info.weights_mapped = !p->m->file().in_private_memory();
    p->info.weights_locked = p->m->file().locked() && p->m->mtp_file()->locked();
    p->info.lock_warning = p->m->lock_warning();
    p->info.path = opts.model_path;
    p->info.n_swa = hp.n_swa;
    p->info.name = hp.name;
    p->info.arch = hp.arch;
    p->info.n_layer = hp.n_layer;
    p->info.n_embd = hp.n_embd;
    p->info.n_vocab = hp.n_vocab;
    p->info.n_ctx_train = hp.n_ctx_train;
    p->info.has_mtp = opts.use_mtp && p->m->weights().mtp.has_value();
    p->info.has_dspark = opts.use_mtp && hp.is_v41() && p->m->has_draft();
    p->info.n_threads = n_threads;
    if (!opts.steering_file.empty() && dist::active()) {
        return {status_code::unsupported,
                "directional steering is not available in pipelined (MPI) runs; run the model "
                "in a single process"};
    }
    if (status st = load_steering(opts, *p); !st.ok()) return st;
    if (dist::active() && dist::rank() == 0) {
        if (hp.is_v41()) {
            return {status_code::unsupported,
                    strfmt("%s: DeepSeek V4.1 (%s) models do not run pipelined across MPI ranks "
                           "yet; run them in a single process",
                           opts.model_path.c_str(), hp.arch.c_str())};
        }
        if (opts.pipeline_chunk < 1)
            return {status_code::invalid_argument, "pipeline: chunk must be at least 1 token"};
        dist::pipeline_options po;
        po.model_path = opts.model_path;
        po.mtp_path = opts.mtp_path;
        po.n_threads = opts.n_threads;
        po.reference_kernels = opts.reference_kernels;
        po.exact_matmul = opts.exact_matmul;
        po.layers = opts.pipeline_layers;
        po.wire_bf16 = !opts.pipeline_f32;
        try {
            p->pipe = std::make_unique<dist::pipeline>(*p->m, po);
        } catch (const Error& e) {
            return {status_code::model_error, e.what()};
        }
        p->pipe_chunk = opts.pipeline_chunk;
        p->info.n_stages = p->pipe->n_stages();
        p->info.pipeline = p->pipe->describe();
        p->info.pipeline_hc_bytes =
            static_cast<uint64_t>(hp.n_hc) * hp.n_embd * (opts.pipeline_f32 ? 4u : 2u);
    }
    *out = std::unique_ptr<Engine>(new Engine(std::move(p)));
    return {};
}

status Engine::measure_copy_bandwidth(size_t bytes, double* gbs) const {
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    try {
        *gbs = impl_->be->measure_copy_bandwidth(bytes);
    } catch (const Error& e) {
        return {status_code::internal, e.what()};
    }
    if (*gbs <= 0.0) {
        return {
            status_code::unsupported,
            strfmt("measure_copy_bandwidth: backend %s has no bandwidth probe", impl_->be->name())};
    }
    return {};
}

Engine::graph_stats Engine::graph_step_stats() const {
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    const backend::graph_step_counts c = impl_->be->graph_counts();
    return {c.steps, c.replays, c.instantiations};
}

void Engine::time_ops(bool on) const {
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    impl_->be->time_ops(on);
}

std::vector<Engine::op_time> Engine::take_op_times() const {
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    std::vector<Engine::op_time> out;
    for (backend::op_time& t : impl_->be->take_op_times()) {
        out.push_back({std::move(t.name), t.calls, t.seconds});
    }
    return out;
}

status Engine::pipeline_ping(size_t bytes, double* seconds) const {
    if (!impl_->pipe) return {status_code::unsupported, "pipeline_ping: not a pipelined engine"};
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    try {
        *seconds = impl_->pipe->ping(bytes);
    } catch (const Error& e) {
        return {status_code::internal, e.what()};
    }
    return {};
}

const tokenizer* Engine::vocab() const {
    return impl_->vocab.get();
}

status Engine::tokenize(std::string_view text, bool rendered, std::vector<int32_t>* out) const {
    out->clear();
    if (!impl_->vocab)
        return {status_code::unsupported, "tokenize: the model file has no tokenizer"};
    impl_->vocab->encode_append(text, rendered, *out);
    return {};
}

std::string Engine::token_bytes(int32_t id) const {
    if (!impl_->vocab || !impl_->vocab->valid(id)) return {};
    return std::string(impl_->vocab->token_bytes(id));
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const {
    std::string out;
    for (int32_t id : tokens) out += token_bytes(id);
    return out;
}

namespace {

std::string render_turns(const std::vector<chat_turn>& turns, think_mode mode, uint64_t n_ctx,
                         bool add_generation_prompt,
                         std::vector<std::pair<size_t, size_t>>* spans) {
    std::vector<chat::message> msgs;
    msgs.reserve(turns.size());
    for (const chat_turn& t : turns) {
        chat::message m;
        const std::optional<chat::role> r = chat::role_from_string(t.role);
        m.role = r ? *r : chat::role::user;
        m.content = t.content;
        if (m.role == chat::role::assistant) m.reasoning_content = t.reasoning;
        msgs.push_back(std::move(m));
    }
    chat::render_options ro;
    ro.mode = mode == think_mode::off  ? chat::think_mode::nothink
              : mode == think_mode::on ? chat::think_mode::think
                                       : chat::think_mode::think_max;
    ro.n_ctx = n_ctx;
    ro.add_generation_prompt = add_generation_prompt;
    ro.client_spans = spans;
    return chat::render_chat(msgs, {}, ro);
}

}  // namespace

std::string Engine::render_chat(const std::vector<chat_turn>& turns, think_mode mode,
                                uint64_t n_ctx, bool add_generation_prompt) {
    return render_turns(turns, mode, n_ctx, add_generation_prompt, nullptr);
}

status Engine::tokenize_chat(const std::vector<chat_turn>& turns, think_mode mode, uint64_t n_ctx,
                             std::vector<int32_t>* out, std::string* text,
                             bool add_generation_prompt) const {
    out->clear();
    if (!impl_->vocab)
        return {status_code::unsupported, "tokenize: the model file has no tokenizer"};
    std::vector<std::pair<size_t, size_t>> spans;
    const std::string rendered = render_turns(turns, mode, n_ctx, add_generation_prompt, &spans);
    try {
        encode_trusted(*impl_->vocab, rendered, specials_outside(*impl_->lits, rendered, spans), 0,
                       *out);
    } catch (const Error& e) {
        out->clear();
        return {status_code::internal, strfmt("tokenize_chat: %s", e.what())};
    }
    if (text) *text = rendered;
    return {};
}

namespace {

// What a session of n_ctx tokens allocates when it is created, computed before any of it is.
struct session_footprint {
    uint64_t cache = 0;     // KV cache buffer (V4.1: and the Engram history)
    uint64_t scratch = 0;   // backend per-thread scratch the context needs
    uint64_t timeline = 0;  // token timeline and logits row
    uint64_t total() const { return cache + scratch + timeline; }
};

session_footprint footprint(const hparams& hp, const backend::backend& be, int64_t n_ctx,
                            bool with_mtp, uint32_t l0, uint32_t l1, bool with_dspark) {
    session_footprint f;
    if (hp.is_v41()) {
        f.cache = kv::cache41::buffer_bytes(hp, n_ctx, with_dspark);
        f.scratch = be.reserve_bytes(graph::forward41_limits(hp, n_ctx));
    } else {
        f.cache = kv::cache::buffer_bytes(hp, n_ctx, with_mtp, l0, l1);
        f.scratch = be.reserve_bytes(graph::scratch_limits(hp, n_ctx));
    }
    f.timeline = static_cast<uint64_t>(n_ctx) * sizeof(int32_t) +
                 static_cast<uint64_t>(hp.n_vocab) * sizeof(float);
    return f;
}

}  // namespace

status Engine::create_session(const session_options& opts, std::unique_ptr<Session>* out) const {
    const hparams& hp = impl_->m->hp();
    if (opts.n_ctx < 1) return {status_code::invalid_argument, "session: n_ctx must be at least 1"};
    if (opts.chunk_size < 1)
        return {status_code::invalid_argument, "session: chunk_size must be at least 1"};
    if (opts.checkpoint_interval < 0)
        return {status_code::invalid_argument, "session: checkpoint_interval must be >= 0"};
    // The bound that keeps every cache size far inside 64 bits (model/hparams.h).
    if (static_cast<uint64_t>(opts.n_ctx) > hparam_limits::kMaxContext) {
        return {
            status_code::invalid_argument,
            strfmt("session: context too large: n_ctx = %lld is above the engine's bound of %llu "
                   "tokens (16x the 1M context of DeepSeek V4 / V4.1)",
                   static_cast<long long>(opts.n_ctx),
                   static_cast<unsigned long long>(hparam_limits::kMaxContext))};
    }
    if (opts.mtp_logits && hp.is_v41()) {
        return {status_code::unsupported,
                "session: MTP logits requested but DeepSeek V4.1 models have no MTP block (their "
                "DSpark draft stages are not exposed by the session API)"};
    }
    if (opts.mtp_logits && !impl_->info.has_mtp) {
        return {status_code::unsupported,
                "session: MTP logits requested but the model has no MTP block"};
    }
    const bool dspark = hp.is_v41() && opts.drafts;
    if (dspark && !impl_->info.has_dspark) {
        return {status_code::unsupported,
                "session: drafts requested but the model has no DSpark draft stages"};
    }
    std::lock_guard<std::mutex> lock(impl_->eval_mutex);
    auto s = std::make_unique<Session::impl>();
    s->eng = impl_.get();
    s->opts = opts;
    s->opts.chunk_size = std::min(opts.chunk_size, opts.n_ctx);
    s->payload_chunk = s->opts.chunk_size;
    backend::backend& be = *impl_->be;
    uint32_t l0 = 0, l1 = hp.n_layer;
    if (impl_->pipe) {
        if (opts.mtp_logits) {
            return {status_code::unsupported,
                    "session: MTP draft logits are not available in a pipelined (MPI) run"};
        }
        // Rank 0 holds the first stage; chunks are cut to the pipeline chunk as well.
        l0 = impl_->pipe->local_range().first;
        l1 = impl_->pipe->local_range().second;
        s->opts.chunk_size = std::min(s->opts.chunk_size, impl_->pipe_chunk);
        try {
            s->dist_id = impl_->pipe->create_session(
                s->opts.n_ctx, s->opts.chunk_size, opts.checkpoint_interval, opts.max_checkpoints);
        } catch (const Error& e) {
            return {status_code::internal, e.what()};
        }
        s->remote_logits = !opts.all_logits;
        s->hc.resize(static_cast<size_t>(s->opts.chunk_size) * hp.n_hc * hp.n_embd);
    }
    // A context the backend's memory cannot hold is refused before any of it is allocated (an
    // allocation that the kernel overcommits would be killed when the cache is cleared).
    const backend::memory_info mem = impl_->be->memory();
    session_footprint fp;
    try {
        fp = footprint(hp, *impl_->be, opts.n_ctx, impl_->info.has_mtp, l0, l1, dspark);
    } catch (const Error& e) {
        return {status_code::invalid_argument, strfmt("session: context too large: %s", e.what())};
    }
    // On a device backend the timeline and the logits row stay on the host.
    const uint64_t need = mem.host ? fp.total() : fp.cache + fp.scratch;
    if (mem.available != 0 && need > mem.available) {
        const std::string parts =
            mem.host ? strfmt("KV cache %s, backend scratch %s, timeline %s",
                              human_bytes(fp.cache).c_str(), human_bytes(fp.scratch).c_str(),
                              human_bytes(fp.timeline).c_str())
                     : strfmt("KV cache %s, backend scratch %s", human_bytes(fp.cache).c_str(),
                              human_bytes(fp.scratch).c_str());
        const std::string room =
            mem.host ? strfmt("the host's %s of memory", human_bytes(mem.available).c_str())
                     : strfmt("the %s free on %s", human_bytes(mem.available).c_str(),
                              mem.where.c_str());
        return {status_code::invalid_argument,
                strfmt("session: context too large: n_ctx = %lld needs %s (%llu bytes: %s), more "
                       "than %s",
                       static_cast<long long>(opts.n_ctx), human_bytes(need).c_str(),
                       static_cast<unsigned long long>(need), parts.c_str(), room.c_str())};
    }
    try {
        s->tl = hp.is_v41()
                    ? make_v41_timeline(*impl_->m, be, opts.n_ctx, dspark)
                    : make_v4_timeline(*impl_->m, be, opts.n_ctx, impl_->info.has_mtp, l0, l1);
        // Size the scratch arena: the forward pass of the largest chunk, with every optional
        // output on, run against a backend that executes nothing.
        s->arena_bytes = s->tl->arena_bytes(s->opts.chunk_size, s->opts.all_logits);
        s->arena_buffer = be.alloc_buffer(s->arena_bytes);
        s->ar = arena(s->arena_buffer, s->arena_bytes);
        s->logits.assign(hp.n_vocab, 0.0f);
        init_session_steering(*impl_, *s);
        // The token timeline never outgrows the context (4 bytes a token, against the cache's
        // kilobytes): reserved now, it never reallocates while decoding.
        s->tokens.reserve(static_cast<size_t>(opts.n_ctx));
    } catch (const std::bad_alloc&) {
        return {status_code::internal,
                strfmt("session: out of host memory for a context of %lld tokens (about %s needed)",
                       static_cast<long long>(opts.n_ctx), human_bytes(fp.total()).c_str())};
    } catch (const Error& e) {
        // Out of memory included (backend::alloc_buffer).
        return {status_code::internal, strfmt("session: %s", e.what())};
    }
    *out = std::unique_ptr<Session>(new Session(std::move(s)));
    return {};
}

}  // namespace magnetar
