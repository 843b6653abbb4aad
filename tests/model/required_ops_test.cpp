// graph::required_ops() against what the forward pass really calls: each tiny model (V4 with an
// MTP block and hash layers, V4.1 with every attention mode and Engram) runs a chunked prefill
// and decode steps through its session timeline on a CPU backend that records every op. A
// called op missing from the list would let a backend without it pass the load-time check and
// fail in the middle of a forward pass; a listed op that is never called would refuse backends
// for nothing. Also the engine's refusal of a backend without an op, and of unknown backends.
#include "graph/required_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "engine/timeline_state.h"
#include "forward_fixtures.h"
#include "magnetar/engine.h"
#include "model/model.h"

namespace magnetar {
namespace {

using backend::op_kind;
namespace mb = ::magnetar::backend;

// The CPU backend, remembering every op it was asked to run.
class recording_backend final : public ::magnetar::backend::cpu_backend {
  public:
    recording_backend() : cpu_backend(2, false, true) {}
    std::set<op_kind> used;

#define MAGNETAR_RECORD(op) used.insert(op_kind::op)
    void get_rows(const tensor& w, const tensor& ids, const tensor& out, int n_rep) override {
        MAGNETAR_RECORD(get_rows);
        cpu_backend::get_rows(w, ids, out, n_rep);
    }
    void copy(const tensor& src, const tensor& dst) override {
        MAGNETAR_RECORD(copy);
        cpu_backend::copy(src, dst);
    }
    void fill(const tensor& dst, float value) override {
        MAGNETAR_RECORD(fill);
        cpu_backend::fill(dst, value);
    }
    void add(const tensor& a, const tensor& b, const tensor& out, int rep) override {
        MAGNETAR_RECORD(add);
        cpu_backend::add(a, b, out, rep);
    }
    void swiglu(const tensor& g, const tensor& u, const tensor& out, float clamp) override {
        MAGNETAR_RECORD(swiglu);
        cpu_backend::swiglu(g, u, out, clamp);
    }
    void matmul(const tensor& w, const tensor& x, const tensor& y) override {
        MAGNETAR_RECORD(matmul);
        cpu_backend::matmul(w, x, y);
    }
    void rms_norm(const tensor& x, const tensor& w, const tensor& out, uint32_t group,
                  float eps) override {
        MAGNETAR_RECORD(rms_norm);
        cpu_backend::rms_norm(x, w, out, group, eps);
    }
    void rope_tail(const tensor& x, uint32_t head_dim, const mb::rope_params& rope, int64_t p0,
                   bool inverse) override {
        MAGNETAR_RECORD(rope_tail);
        cpu_backend::rope_tail(x, head_dim, rope, p0, inverse);
    }
    void fp8_kv_roundtrip(const tensor& x, uint32_t n_nope) override {
        MAGNETAR_RECORD(fp8_kv_roundtrip);
        cpu_backend::fp8_kv_roundtrip(x, n_nope);
    }
    void indexer_qat(const tensor& x, uint32_t head_dim) override {
        MAGNETAR_RECORD(indexer_qat);
        cpu_backend::indexer_qat(x, head_dim);
    }
    void hc_pre(const mb::hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                const tensor& base, const tensor& y, const tensor& post, const tensor& comb,
                const tensor& mix) override {
        MAGNETAR_RECORD(hc_pre);
        cpu_backend::hc_pre(p, x, fn, scale, base, y, post, comb, mix);
    }
    void hc_post(const mb::hc_params& p, const tensor& x, const tensor& f, const tensor& post,
                 const tensor& comb, const tensor& out) override {
        MAGNETAR_RECORD(hc_post);
        cpu_backend::hc_post(p, x, f, post, comb, out);
    }
    void hc_collapse(const mb::hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                     const tensor& base, const tensor& out, const tensor& mix) override {
        MAGNETAR_RECORD(hc_collapse);
        cpu_backend::hc_collapse(p, x, fn, scale, base, out, mix);
    }
    void kv_store(const tensor& kv, const tensor& ring, int64_t p0) override {
        MAGNETAR_RECORD(kv_store);
        cpu_backend::kv_store(kv, ring, p0);
    }
    void compressor(const mb::compressor_params& p, const tensor& kvp, const tensor& sc,
                    const tensor& ape, const tensor& norm, const tensor& state_kv,
                    const tensor& state_score, const tensor& rows) override {
        MAGNETAR_RECORD(compressor);
        cpu_backend::compressor(p, kvp, sc, ape, norm, state_kv, state_score, rows);
    }
    void indexer_topk(const mb::indexer_params& p, const tensor& qi, const tensor& wgt,
                      const tensor& rows, const tensor& sel) override {
        MAGNETAR_RECORD(indexer_topk);
        cpu_backend::indexer_topk(p, qi, wgt, rows, sel);
    }
    void sparse_attention(const mb::attention_params& p, const tensor& q, const tensor& kv,
                          const tensor& ring, const tensor& comp, const tensor& sel,
                          const tensor& sinks, const tensor& out) override {
        MAGNETAR_RECORD(sparse_attention);
        cpu_backend::sparse_attention(p, q, kv, ring, comp, sel, sinks, out);
    }
    void router(const mb::router_params& p, const tensor& logits, const tensor& bias,
                const tensor& tid2eid, const tensor& ids, const tensor& sel,
                const tensor& weights) override {
        MAGNETAR_RECORD(router);
        cpu_backend::router(p, logits, bias, tid2eid, ids, sel, weights);
    }
    void moe(const tensor& x, const tensor& sel, const tensor& weights, const mb::moe_weights& w,
             float clamp, const tensor& out, const mb::moe_workspace& ws) override {
        MAGNETAR_RECORD(moe);
        cpu_backend::moe(x, sel, weights, w, clamp, out, ws);
    }
    void project_out(const tensor& x, const tensor& v, float scale) override {
        MAGNETAR_RECORD(project_out);
        cpu_backend::project_out(x, v, scale);
    }
    void round_bf16(const tensor& x) override {
        MAGNETAR_RECORD(round_bf16);
        cpu_backend::round_bf16(x);
    }
    void qdq_rows(const tensor& x, mb::qdq_format fmt, const tensor& packed) override {
        MAGNETAR_RECORD(qdq_rows);
        cpu_backend::qdq_rows(x, fmt, packed);
    }
    void rope41(const tensor& x, uint32_t head_dim, const mb::rope41_params& rope, int64_t p0,
                int64_t stride, bool inverse) override {
        MAGNETAR_RECORD(rope41);
        cpu_backend::rope41(x, head_dim, rope, p0, stride, inverse);
    }
    void hc41_pre(const mb::hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                  const tensor& base, const tensor& carry, const tensor& y, const tensor& pre,
                  const tensor& post, const tensor& comb, const tensor& mix) override {
        MAGNETAR_RECORD(hc41_pre);
        cpu_backend::hc41_pre(p, x, fn, scale, base, carry, y, pre, post, comb, mix);
    }
    void hc41_collapse(const mb::hc_params& p, const tensor& x, const tensor& w,
                       const tensor& out) override {
        MAGNETAR_RECORD(hc41_collapse);
        cpu_backend::hc41_collapse(p, x, w, out);
    }
    void compressor41(const mb::compressor41_params& p, const tensor& a, const tensor& b,
                      const tensor& state_a, const tensor& state_b, const tensor& z) override {
        MAGNETAR_RECORD(compressor41);
        cpu_backend::compressor41(p, a, b, state_a, state_b, z);
    }
    void indexer41(const mb::indexer41_params& p, const tensor& qi, const tensor& w,
                   const tensor& keys, const tensor& cand_in, const tensor& cand_out,
                   const tensor& sel) override {
        MAGNETAR_RECORD(indexer41);
        cpu_backend::indexer41(p, qi, w, keys, cand_in, cand_out, sel);
    }
    void attention41(const mb::attention41_params& p, const tensor& q, const tensor& kv,
                     const tensor& ring, const tensor& comp, const tensor& sel, const tensor& sinks,
                     const tensor& out) override {
        MAGNETAR_RECORD(attention41);
        cpu_backend::attention41(p, q, kv, ring, comp, sel, sinks, out);
    }
    void moe41(const tensor& xq, const tensor& sel, const tensor& weights, const mb::moe_weights& w,
               float clamp, const tensor& out, const mb::moe_workspace& ws) override {
        MAGNETAR_RECORD(moe41);
        cpu_backend::moe41(xq, sel, weights, w, clamp, out, ws);
    }
    void engram_gather(const tensor& table, const tensor& idx, const tensor& out) override {
        MAGNETAR_RECORD(engram_gather);
        cpu_backend::engram_gather(table, idx, out);
    }
    void engram_gate(const mb::engram_params& p, const tensor& x, const tensor& kv,
                     const tensor& wq, const tensor& out) override {
        MAGNETAR_RECORD(engram_gate);
        cpu_backend::engram_gate(p, x, kv, wq, out);
    }
#undef MAGNETAR_RECORD
};

// Every op kind has an override above: a new op_kind must be added there (and to the list).
static_assert(backend::k_op_count == 31, "record the new op in recording_backend");

// Runs a prefill in two chunks and then decode steps, as a session does, over the timeline of
// the model's architecture.
std::set<op_kind> ops_called(const std::string& path) {
    const auto m = model::load(path);
    recording_backend be;
    const hparams& hp = m->hp();
    constexpr int64_t kLen = 300;  // past the window, ratio-128 blocks and the indexer budget
    const bool mtp = m->weights().mtp.has_value();
    std::unique_ptr<timeline_state> tl = hp.is_v41()
                                             ? make_v41_timeline(*m, be, kLen, false)
                                             : make_v4_timeline(*m, be, kLen, mtp, 0, hp.n_layer);
    const size_t bytes = tl->arena_bytes(kLen, true);
    void* buf = be.alloc_buffer(bytes);
    arena ar(buf, bytes);
    const std::vector<int32_t> toks = test::test_tokens(test::kTokenSeed, kLen, hp.n_vocab);
    std::vector<float> logits(static_cast<size_t>(kLen) * hp.n_vocab);
    std::vector<float> mtp_out(static_cast<size_t>(kLen) * hp.n_vocab);
    int64_t p = 0;
    for (const int64_t n : {int64_t{200}, int64_t{90}, int64_t{1}, int64_t{1}, int64_t{1}}) {
        graph::chunk_request req;
        req.p0 = p;
        req.n = n;
        req.tokens = toks.data() + p;
        req.logits_all = true;
        req.logits = logits.data();
        req.mtp = mtp;
        req.mtp_logits = mtp;
        req.mtp_out = mtp ? mtp_out.data() : nullptr;
        tl->run(req, ar, nullptr);
        p += n;
    }
    be.synchronize();
    tl.reset();
    be.free_buffer(buf);
    return be.used;
}

std::string names(const std::set<op_kind>& ops) {
    std::string s;
    for (op_kind op : ops) s += std::string(s.empty() ? "" : ", ") + backend::op_name(op);
    return s.empty() ? "(none)" : s;
}

void expect_list_matches(const std::string& path) {
    const auto m = model::load(path);
    const std::vector<op_kind> listed_v = graph::required_ops(m->hp());
    const std::set<op_kind> listed(listed_v.begin(), listed_v.end());
    EXPECT_EQ(listed.size(), listed_v.size()) << "an op is listed twice";
    const std::set<op_kind> called = ops_called(path);
    std::set<op_kind> unlisted, uncalled;
    std::set_difference(called.begin(), called.end(), listed.begin(), listed.end(),
                        std::inserter(unlisted, unlisted.end()));
    std::set_difference(listed.begin(), listed.end(), called.begin(), called.end(),
                        std::inserter(uncalled, uncalled.end()));
    EXPECT_TRUE(unlisted.empty()) << m->hp().arch << ": called but not listed: " << names(unlisted);
    EXPECT_TRUE(uncalled.empty()) << m->hp().arch
                                  << ": listed but never called: " << names(uncalled);
}

TEST(RequiredOps, DeepSeekV4ListIsWhatTheForwardPassCalls) {
    expect_list_matches(test::tiny_model("tiny-mtp", "published"));
}

TEST(RequiredOps, DeepSeekV41ListIsWhatTheForwardPassCalls) {
    expect_list_matches(test::tiny_model("v41-tiny", "lossless"));
}

// A backend that lacks ops is named with the ops.
class partial_backend final : public backend::cpu_backend {
  public:
    partial_backend() : cpu_backend(1) {}
    bool supports(op_kind op) const override {
        return op != op_kind::moe && op != op_kind::indexer_topk && cpu_backend::supports(op);
    }
};

TEST(RequiredOps, MissingOpsAreListedInOrder) {
    const auto m = model::load(test::tiny_model("tiny", "f32"));
    partial_backend be;
    const auto missing = backend::missing_ops(be, graph::required_ops(m->hp()));
    ASSERT_EQ(missing.size(), 2u);
    EXPECT_EQ(missing[0], op_kind::indexer_topk);
    EXPECT_EQ(missing[1], op_kind::moe);
    backend::cpu_backend full(1);
    EXPECT_TRUE(backend::missing_ops(full, graph::required_ops(m->hp())).empty());
}

status load_with(const std::string& backend_name, std::unique_ptr<Engine>* e) {
    engine_options eo;
    eo.model_path = test::tiny_model("tiny", "f32");
    eo.backend = backend_name;
    eo.n_threads = 1;
    eo.quiet = true;
    return Engine::load(eo, e);
}

TEST(EngineBackend, CpuIsTheDefaultAndDescribesItself) {
    engine_options eo;
    EXPECT_EQ(eo.backend, "cpu");
    std::unique_ptr<Engine> e;
    const status st = load_with("cpu", &e);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(e->info().backend, "cpu");
    EXPECT_NE(e->info().device.find("cpu (1 thread"), std::string::npos) << e->info().device;
    EXPECT_EQ(e->info().device_weight_bytes, 0u);  // read in place from the mapping
    const Engine::graph_stats g = e->graph_step_stats();
    EXPECT_EQ(g.steps, 0u);
    double gbs = 0;
    EXPECT_EQ(e->measure_copy_bandwidth(1 << 20, &gbs).code(), status_code::unsupported);
}

TEST(EngineBackend, OpTimingGroupsTheDecodeStepByKernel) {
    engine_options eo;
    eo.model_path = test::tiny_model("tiny", "published");  // Q8_0 dense, IQ2_XXS / Q2_K experts
    eo.n_threads = 1;
    eo.quiet = true;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::load(eo, &e).ok());
    std::unique_ptr<Session> s;
    ASSERT_TRUE(e->create_session({}, &s).ok());
    const std::vector<int32_t> prompt = {0, 5, 9, 17};
    ASSERT_TRUE(s->eval(prompt).ok());
    EXPECT_TRUE(e->take_op_times().empty());  // off by default: nothing timed

    e->time_ops(true);
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t next = 3;
    ASSERT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    e->time_ops(false);
    const std::vector<Engine::op_time> ops = e->take_op_times();
    ASSERT_FALSE(ops.empty());
    double sum = 0;
    std::set<std::string> names;
    for (size_t i = 0; i < ops.size(); ++i) {
        EXPECT_GT(ops[i].calls, 0u) << ops[i].name;
        EXPECT_GE(ops[i].seconds, 0.0) << ops[i].name;
        if (i > 0) {
            EXPECT_LE(ops[i].seconds, ops[i - 1].seconds);  // slowest first
        }
        EXPECT_TRUE(names.insert(ops[i].name).second) << "group twice: " << ops[i].name;
        sum += ops[i].seconds;
    }
    // Nested groups count once: the MoE op's products are moved out of its own group.
    EXPECT_LE(sum, wall * 1.001);
    for (const char* want : {"q8_0 matmul", "iq2_xxs experts", "q2_K experts", "attention",
                             "moe (gather, SwiGLU, sum)", "hyper-connections"}) {
        EXPECT_TRUE(names.count(want)) << "no group " << want;
    }
    EXPECT_TRUE(e->take_op_times().empty());  // taken and cleared
    ASSERT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
    EXPECT_TRUE(e->take_op_times().empty());  // off again
}

TEST(EngineBackend, UnknownBackendIsRefusedWithTheBuiltOnes) {
    std::unique_ptr<Engine> e;
    const status st = load_with("tpu", &e);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(st.message().find("unknown backend 'tpu' (this build has: cpu"), std::string::npos)
        << st.message();
}

TEST(EngineBackend, CudaWithoutADeviceFailsAtLoadWithOneLine) {
    std::string device;
    engine_options probe;
    probe.backend = "cuda";
    if (Engine::probe_backend(probe, &device).ok())
        GTEST_SKIP() << "a CUDA device is present: " << device;
    std::unique_ptr<Engine> e;
    const status st = load_with("cuda", &e);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(e, nullptr);
    EXPECT_EQ(st.message().rfind("backend cuda: ", 0), 0u) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

}  // namespace
}  // namespace magnetar
