// DeepSeek V4.1 attention modes and Engram table access: Reuse layers run no indexer, the
// candidate source publishes its blocks and only Reindex layers mask with them, Reindex
// selections lie inside the kept candidate blocks, Reuse layers take their source's list
// verbatim; and an Engram lookup pages in only the table rows it reads.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/rng.h"
#include "forward_fixtures.h"
#include "gguf/gguf.h"
#include "graph/forward41.h"
#include "kv/cache41.h"
#include "model/model.h"

namespace magnetar {
namespace {

// The CPU backend, recording each indexer call.
struct counting_backend : backend::cpu_backend {
    struct call {
        bool cand_in = false;
        bool cand_out = false;
        uint32_t ratio = 0;
    };
    std::vector<call> indexer_calls;
    int attention_calls = 0;

    counting_backend() : cpu_backend(2, false, true) {}
    void indexer41(const ::magnetar::backend::indexer41_params& p, const tensor& qi,
                   const tensor& w, const tensor& keys, const tensor& cand_in,
                   const tensor& cand_out, const tensor& sel) override {
        indexer_calls.push_back({static_cast<bool>(cand_in), static_cast<bool>(cand_out), p.ratio});
        cpu_backend::indexer41(p, qi, w, keys, cand_in, cand_out, sel);
    }
    void attention41(const ::magnetar::backend::attention41_params& p, const tensor& q,
                     const tensor& kv, const tensor& ring, const tensor& comp, const tensor& sel,
                     const tensor& sinks, const tensor& out) override {
        ++attention_calls;
        cpu_backend::attention41(p, q, kv, ring, comp, sel, sinks, out);
    }
};

struct keep_dumps final : graph::dump_sink {
    std::map<std::string, std::vector<float>> data;
    std::map<std::string, int64_t> width;
    bool wants(const std::string&) const override { return true; }
    void rows(const std::string& name, int64_t, int64_t n, int64_t w, const float* d) override {
        auto& v = data[name];
        v.insert(v.end(), d, d + n * w);
        width[name] = w;
    }
};

TEST(V41Modes, IndexerRunsOnlyAtIndexSourcesAndReindexStaysInsideCandidates) {
    auto m = model::load(test::tiny_model("v41-tiny", "lossless"));
    const hparams& hp = m->hp();
    counting_backend be;
    const int64_t n = 64;  // 64 ratio-1 entries: 16 blocks of 4, of which 2 are kept
    Rng rng(3);
    std::vector<int32_t> toks;
    for (int64_t i = 0; i < n; ++i) toks.push_back(static_cast<int32_t>(rng.below(hp.n_vocab)));
    be.reserve(graph::forward41_limits(hp, n));
    kv::cache41 cache(be, hp, n, false);
    const size_t bytes = graph::forward41_scratch_bytes(*m, n, n, false);
    void* buf = be.alloc_buffer(bytes);
    arena ar(buf, bytes);
    graph::forward41 fwd(*m, be);
    keep_dumps dumps;
    std::vector<float> logits(hp.n_vocab);
    graph::chunk_request req;
    req.n = n;
    req.tokens = toks.data();
    req.logits_last = true;
    req.logits = logits.data();
    fwd.run(req, cache, ar, &dumps);
    be.free_buffer(buf);

    // One indexer call per index source (layers 1, 3, 4, 6), none for Reuse or SWA layers.
    ASSERT_EQ(be.indexer_calls.size(), hp.v41.index_sources.size());
    EXPECT_EQ(be.attention_calls, static_cast<int>(hp.n_layer));
    for (size_t i = 0; i < hp.v41.index_sources.size(); ++i) {
        const uint32_t il = hp.v41.index_sources[i];
        EXPECT_EQ(be.indexer_calls[i].cand_out, hp.is_candidate_src(il)) << "layer " << il;
        EXPECT_EQ(be.indexer_calls[i].cand_in, hp.uses_candidates(il)) << "layer " << il;
        EXPECT_EQ(be.indexer_calls[i].ratio, hp.compress_ratio(il)) << "layer " << il;
    }
    // Reuse layers take their index source's list verbatim.
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        if (hp.mode(il) != layer_mode::reuse) continue;
        const std::string src = "blk." + std::to_string(hp.index_source(il)) + ".topk";
        EXPECT_EQ(dumps.data.at("blk." + std::to_string(il) + ".topk"), dumps.data.at(src))
            << "layer " << il;
    }
    // Every Reindex selection lies in a block the candidate source kept for that query, and the
    // mask is active (fewer kept blocks than visible ones) for the later queries.
    const int64_t B = hp.v41.candidate_block_size;
    const std::string cand = "blk." + std::to_string(hp.v41.candidate_source) + ".candidates";
    const int64_t nb = dumps.width.at(cand);
    int64_t masked_queries = 0;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        if (hp.mode(il) != layer_mode::reindex) continue;
        const std::vector<float>& sel = dumps.data.at("blk." + std::to_string(il) + ".topk");
        const int64_t K = dumps.width.at("blk." + std::to_string(il) + ".topk");
        for (int64_t p = 0; p < n; ++p) {
            const float* kept = dumps.data.at(cand).data() + p * nb;
            const int64_t n_vis_blocks = (p + 1 + B - 1) / B;
            if (n_vis_blocks > nb) ++masked_queries;
            for (int64_t j = 0; j < K; ++j) {
                const int64_t e = static_cast<int64_t>(sel[static_cast<size_t>(p * K + j)]);
                if (e < 0) continue;
                bool inside = false;
                for (int64_t b = 0; b < nb; ++b) inside |= static_cast<int64_t>(kept[b]) == e / B;
                EXPECT_TRUE(inside) << "layer " << il << " position " << p << " entry " << e;
            }
        }
    }
    EXPECT_GT(masked_queries, 40);
}

// A table much larger than what is read: looking up a few rows must page in only their pages.
TEST(V41Engram, LookupPagesInOnlyTheRowsRead) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("magnetar-engram-" + std::to_string(::getpid())))
            .string();
    const int64_t row = 264;               // released row264 rows
    const int64_t rows = 4 * 1024 * 1024;  // 1.03 GiB, sparse on disk
    FILE* f = std::fopen(path.c_str(), "w+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(::fileno(f), row * rows), 0);
    std::fclose(f);
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    const size_t bytes = static_cast<size_t>(row * rows);
    void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ASSERT_NE(base, MAP_FAILED);
    gguf::advise_random_access(base, bytes);

    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t n_pages = (bytes + page - 1) / page;
    auto resident = [&] {
        std::vector<unsigned char> v(n_pages);
        EXPECT_EQ(::mincore(base, bytes, v.data()), 0);
        size_t c = 0;
        for (unsigned char b : v) c += b & 1;
        return c;
    };
    const size_t before = resident();

    backend::cpu_backend be(2, false, true);
    tensor table = make_tensor(base, ggml_type::I8, row, rows);
    const int64_t lookups = 24;
    std::vector<int32_t> idx;
    Rng rng(5);
    for (int64_t i = 0; i < lookups; ++i) idx.push_back(static_cast<int32_t>(rng.below(rows)));
    tensor ids = make_tensor(idx.data(), ggml_type::I32, lookups, 1);
    std::vector<float> out(static_cast<size_t>(lookups * 256));
    tensor o = make_tensor(out.data(), ggml_type::F32, lookups * 256, 1);
    be.engram_gather(table, ids, o);
    const size_t after = resident();
    ::munmap(base, bytes);
    ::close(fd);
    std::filesystem::remove(path);
    // Each 264-byte row spans at most two pages.
    EXPECT_LE(after - before, static_cast<size_t>(2 * lookups)) << "of " << n_pages << " pages";
    EXPECT_GE(after - before, static_cast<size_t>(1));
    std::printf("Engram lookup: %zu of %zu table pages resident after %lld row reads\n",
                after - before, n_pages, static_cast<long long>(lookups));
}

}  // namespace
}  // namespace magnetar
