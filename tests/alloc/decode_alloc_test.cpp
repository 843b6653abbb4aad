// Steady-state decode allocates nothing: after a prefill and a few warm-up steps, further
// single-token evaluations through the Session API (V4 tiny model, published quant mix and F32,
// with and without the MTP block; the V4.1 v41-tiny model with its Engram layers, indexer
// candidates and the shared attention runtime) make no C++ heap allocation on any thread.
//
// This executable replaces the global operator new / delete with counting pass-throughs to
// malloc / free (so it is a folder of its own: the counting must not leak into other tests).
// Allocations made with malloc directly are not seen; the engine allocates through containers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "model/forward_fixtures.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};

void* counted(std::size_t n, std::size_t align) {
    if (g_counting.load(std::memory_order_relaxed)) {
        g_allocations.fetch_add(1, std::memory_order_relaxed);
    }
    if (n == 0) n = 1;
    void* p = align <= alignof(std::max_align_t)
                  ? std::malloc(n)
                  : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}

}  // namespace

void* operator new(std::size_t n) {
    return counted(n, 0);
}
void* operator new[](std::size_t n) {
    return counted(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
    return counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return counted(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

namespace magnetar {
namespace {

int32_t argmax(std::span<const float> l) {
    size_t best = 0;
    for (size_t i = 1; i < l.size(); ++i) {
        if (l[i] > l[best]) best = i;
    }
    return static_cast<int32_t>(best);
}

// Allocations made by `steps` greedy decode steps after a 40-token prefill and 4 warm-up steps
// (100 steps: the token timeline passes several doublings of its first capacity).
uint64_t decode_allocations(const std::string& preset, const std::string& weights, int steps) {
    engine_options eo;
    eo.model_path = test::tiny_model(preset, weights);
    eo.n_threads = 2;
    std::unique_ptr<Engine> engine;
    const status st = Engine::load(eo, &engine);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return ~uint64_t{0};
    session_options so;
    so.n_ctx = 512;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    EXPECT_TRUE(engine->create_session(so, &s).ok());
    const std::vector<int32_t> prompt =
        test::test_tokens(test::kTokenSeed, 40, engine->info().n_vocab);
    EXPECT_TRUE(s->eval(prompt).ok());
    for (int i = 0; i < 4; ++i) {
        const int32_t next = argmax(s->logits());
        EXPECT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
    }
    g_allocations.store(0);
    g_counting.store(true);
    for (int i = 0; i < steps; ++i) {
        const int32_t next = argmax(s->logits());
        const status e = s->eval(std::span<const int32_t>(&next, 1));
        if (!e.ok()) {
            g_counting.store(false);
            ADD_FAILURE() << e.message();
            break;
        }
    }
    g_counting.store(false);
    return g_allocations.load();
}

TEST(DecodeAllocations, NoneInSteadyStatePublished) {
    EXPECT_EQ(decode_allocations("tiny", "published", 100), 0u);
}

TEST(DecodeAllocations, NoneInSteadyStateF32) {
    EXPECT_EQ(decode_allocations("tiny", "f32", 100), 0u);
}

TEST(DecodeAllocations, NoneInSteadyStateWithMtp) {
    EXPECT_EQ(decode_allocations("tiny-mtp", "published", 100), 0u);
}

TEST(DecodeAllocations, NoneInSteadyStateV41) {
    EXPECT_EQ(decode_allocations("v41-tiny", "lossless", 100), 0u);
}

}  // namespace
}  // namespace magnetar
