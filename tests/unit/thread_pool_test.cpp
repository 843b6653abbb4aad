// The thread pool's hand-off (core/thread_pool.h): every index of every loop runs exactly once
// on its fixed slice, whether the workers were polling or asleep when the loop was published;
// loops smaller than the pool leave the extra workers out; nested loops run inline; idle
// workers go to sleep after their polling time; pools are destroyed cleanly in any state.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace magnetar {
namespace {

// Loops of random sizes with random pauses between them (none, shorter and longer than the
// polling time), so workers are caught polling, yielding and asleep.
void exercise(thread_pool& pool, int loops, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::atomic<int>> hits(4096);
    std::vector<int> owner(4096);
    for (int l = 0; l < loops; ++l) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % (l % 3 == 0 ? 3 : 4096));
        for (int64_t i = 0; i < n; ++i) hits[static_cast<size_t>(i)].store(0);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int th) {
            for (int64_t i = b; i < e; ++i) {
                hits[static_cast<size_t>(i)].fetch_add(1);
                owner[static_cast<size_t>(i)] = th;
            }
        });
        const int tasks = static_cast<int>(std::min<int64_t>(n, pool.size()));
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "loop " << l << " index " << i;
            // The static partition: slice t is [n t / tasks, n (t + 1) / tasks).
            int t = 0;
            while (!(i >= n * t / tasks && i < n * (t + 1) / tasks)) ++t;
            ASSERT_EQ(owner[static_cast<size_t>(i)], t) << "loop " << l << " index " << i;
        }
        switch (rng() % 8) {
            case 0:
                std::this_thread::sleep_for(std::chrono::microseconds(50));
                break;
            case 1:
                std::this_thread::sleep_for(std::chrono::microseconds(400));
                break;
            case 2:
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                break;
            default:
                break;
        }
    }
}

TEST(ThreadPool, EveryIndexOnceOnItsSliceWhateverTheWorkersWereDoing) {
    for (int spin : {0, 1, thread_pool::kDefaultSpinUs}) {
        for (int threads : {1, 2, 3, 5}) {
            thread_pool pool(threads, spin);
            exercise(pool, 300, static_cast<uint32_t>(spin * 10 + threads));
        }
    }
}

TEST(ThreadPool, NestedLoopsRunInlineOnTheCallingTask) {
    thread_pool pool(3);
    std::atomic<int> total{0};
    std::atomic<int> foreign{0};
    pool.parallel_for(3, [&](int64_t, int64_t, int outer) {
        pool.parallel_for(10, [&](int64_t b, int64_t e, int inner) {
            total.fetch_add(static_cast<int>(e - b));
            if (inner != 0) foreign.fetch_add(1);  // inline: one slice, thread index 0
        });
        (void)outer;
    });
    EXPECT_EQ(total.load(), 30);
    EXPECT_EQ(foreign.load(), 0);
}

// Idle workers stop polling and sleep (no core kept busy by an idle engine).
TEST(ThreadPool, IdleWorkersGoToSleep) {
    for (int spin : {0, 50, thread_pool::kDefaultSpinUs}) {
        thread_pool pool(3, spin);
        pool.parallel_for(3, [](int64_t, int64_t, int) {});
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (pool.sleeps() < 2 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_GE(pool.sleeps(), 2u) << "spin " << spin;
        // And they wake for the next loop.
        std::atomic<int> ran{0};
        pool.parallel_for(3, [&](int64_t, int64_t, int) { ran.fetch_add(1); });
        EXPECT_EQ(ran.load(), 3);
    }
}

TEST(ThreadPool, DestroyedWhilePollingAsleepOrJustStarted) {
    for (int i = 0; i < 50; ++i) {
        thread_pool fresh(4, i % 2 ? 0 : thread_pool::kDefaultSpinUs);  // never used
    }
    for (int i = 0; i < 50; ++i) {
        thread_pool pool(4, thread_pool::kDefaultSpinUs);
        pool.parallel_for(4, [](int64_t, int64_t, int) {});
        if (i % 2) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    SUCCEED();
}

}  // namespace
}  // namespace magnetar
