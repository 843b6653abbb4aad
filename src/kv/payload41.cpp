#include "kv/payload41.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "kv/payload_io.h"
#include "quant/fp8fp4.h"

namespace magnetar::kv {

namespace {

constexpr uint32_t k_no_slot = 0xffffffffu;  // runtime slot -1

// clang-format off
const char* const k_field_names[k_payload41_fields] = {
    "magic", "version", "context", "prefill chunk", "token count",
    "layer count", "DSpark stages", "block count", "window", "window rows",
    "head dim", "indexer head dim", "window row bytes", "compressed row bytes",
    "index key row bytes", "KV source count", "vocabulary", "Engram history length",
    "runtime slot"};

enum field : int {
    f_magic, f_version, f_context, f_chunk, f_n, f_layers, f_stages, f_blocks, f_window,
    f_window_rows, f_head_dim, f_idx_head_dim, f_window_row_bytes, f_comp_row_bytes,
    f_idx_row_bytes, f_sources, f_vocab, f_history, f_slot
};
// clang-format on

const char* const k_source_field_names[k_payload41_source_fields] = {
    "block", "ratio", "compressed-row count", "index-row count", "pending-row count"};

uint32_t window_rows_of(const hparams& hp, int64_t n) {
    return static_cast<uint32_t>(std::min<int64_t>(n, hp.n_swa));
}

uint64_t history_len_of(const hparams& hp, int64_t n) {
    return hp.v41.engram.n_layers() > 0 ? static_cast<uint64_t>(n) : 0u;
}

// DSpark stages recorded by a payload written from `c`.
uint32_t stages_of(const hparams& hp, const cache41& c) {
    return c.n_blocks() > hp.n_layer ? hp.n_dspark() : 0u;
}

// The per-source table of an n-token timeline: block, ratio, compressed rows, index rows,
// pending rows.
std::vector<uint32_t> source_table(const hparams& hp, int64_t n) {
    std::vector<uint32_t> t;
    for (uint32_t s : hp.v41.kv_sources) {
        const uint32_t r = hp.compress_ratio(s);
        MAGNETAR_ASSERT(r >= 1, "session payload: a KV source without a compression ratio");
        const uint32_t rows = static_cast<uint32_t>(n / r);
        t.insert(t.end(), {s, r, rows, rows, r >= 2 ? static_cast<uint32_t>(n % r) : 0u});
    }
    return t;
}

uint64_t size_of(const hparams& hp, uint32_t stages, int64_t n) {
    const uint64_t un = static_cast<uint64_t>(n);
    const uint64_t main_row = static_cast<uint64_t>(quant::main_kv_row_bytes(hp.n_head_dim));
    const uint64_t idx_row =
        static_cast<uint64_t>(quant::index_key_row_bytes(hp.n_indexer_head_dim));
    const uint64_t win_row = static_cast<uint64_t>(quant::window_row_bytes(hp.n_head_dim));
    uint64_t b = 4ull * k_payload41_fields;
    b += 4ull * k_payload41_source_fields * hp.v41.kv_sources.size();
    b += 4ull * un + 4ull * hp.n_vocab + 8ull * history_len_of(hp, n);
    b += static_cast<uint64_t>(hp.n_layer + stages) * window_rows_of(hp, n) * win_row;
    for (uint32_t s : hp.v41.kv_sources) {
        const uint64_t r = hp.compress_ratio(s);
        b += (un / r) * (main_row + idx_row);
        if (r >= 2) b += 2ull * (un % r) * hp.n_head_dim * sizeof(float);
    }
    return b;
}

// The window rows of positions [n - w, n) of a ring of W rows (row = position mod W), oldest
// first: at most two contiguous runs of slots.
struct ring_runs {
    int64_t first_slot, first_len, second_len;
};
ring_runs ring_runs_of(int64_t n, int64_t w, int64_t ring_rows) {
    const int64_t start = (n - w) % ring_rows;
    const int64_t first = std::min(w, ring_rows - start);
    return {start, first, w - first};
}

void read_impl(backend::backend& be, const hparams& hp, cache41& c, const byte_source& source,
               uint64_t size, std::vector<int32_t>* tokens, std::vector<float>* logits) {
    MAGNETAR_ASSERT(c.n_blocks() == hp.n_layer || c.n_blocks() == hp.n_layer + hp.n_dspark(),
                    "read_payload41: a cache of another model");
    payload_reader in(source, size);
    uint32_t f[k_payload41_fields];
    for (int i = 0; i < k_payload41_fields; ++i) f[i] = in.u32(k_field_names[i]);
    auto expect = [&](int i, uint64_t want) {
        if (f[i] != want) {
            throw Error(strfmt("session payload: %s is %u, expected %llu", k_field_names[i], f[i],
                               static_cast<unsigned long long>(want)));
        }
    };
    expect(f_magic, k_payload41_magic);
    expect(f_version, k_payload41_version);
    expect(f_layers, hp.n_layer);
    const uint32_t stages = f[f_stages];
    if (stages != 0 && stages != hp.n_dspark()) {
        throw Error(strfmt("session payload: DSpark stages is %u, expected 0 or %u", stages,
                           hp.n_dspark()));
    }
    if (stages == 0 && c.n_blocks() > hp.n_layer) {
        throw Error(
            strfmt("session payload: DSpark stages is 0 (written without the DSpark rings), "
                   "expected %u: this session drafts with DSpark",
                   c.n_blocks() - hp.n_layer));
    }
    expect(f_blocks, static_cast<uint64_t>(hp.n_layer) + stages);
    expect(f_window, hp.n_swa);
    expect(f_head_dim, hp.n_head_dim);
    expect(f_idx_head_dim, hp.n_indexer_head_dim);
    expect(f_window_row_bytes, static_cast<uint64_t>(quant::window_row_bytes(hp.n_head_dim)));
    expect(f_comp_row_bytes, static_cast<uint64_t>(quant::main_kv_row_bytes(hp.n_head_dim)));
    expect(f_idx_row_bytes,
           static_cast<uint64_t>(quant::index_key_row_bytes(hp.n_indexer_head_dim)));
    expect(f_sources, hp.v41.kv_sources.size());
    expect(f_vocab, hp.n_vocab);
    const int64_t n = f[f_n];
    if (n < 1 || n > c.n_ctx()) {
        throw Error(
            strfmt("session payload: token count is %lld, expected 1 to %lld (this session's "
                   "context)",
                   static_cast<long long>(n), static_cast<long long>(c.n_ctx())));
    }
    if (f[f_context] < n) {
        throw Error(strfmt("session payload: context is %u, expected at least the token count %lld",
                           f[f_context], static_cast<long long>(n)));
    }
    if (f[f_chunk] < 1) throw Error("session payload: prefill chunk is 0, expected at least 1");
    expect(f_window_rows, window_rows_of(hp, n));
    expect(f_history, history_len_of(hp, n));
    const int32_t slot = static_cast<int32_t>(f[f_slot]);
    if (f[f_slot] != k_no_slot) {
        // Only a KV source publishes, and only once it has emitted a compressed row (§9.2).
        const bool ok = slot >= 0 && static_cast<uint32_t>(slot) < hp.n_layer &&
                        hp.is_kv_source(static_cast<uint32_t>(slot)) &&
                        n >= hp.compress_ratio(static_cast<uint32_t>(slot));
        if (!ok) {
            throw Error(
                strfmt("session payload: runtime slot is %d, expected -1 or a KV source "
                       "layer that has emitted a compressed row",
                       slot));
        }
    }

    const std::vector<uint32_t> table = source_table(hp, n);
    for (size_t i = 0; i < table.size(); ++i) {
        const uint32_t got = in.u32("KV source table");
        if (got != table[i]) {
            const size_t s = i / k_payload41_source_fields;
            throw Error(strfmt("session payload: KV source %zu (block %u) %s is %u, expected %u", s,
                               table[s * k_payload41_source_fields],
                               k_source_field_names[i % k_payload41_source_fields], got, table[i]));
        }
    }
    const uint64_t want = size_of(hp, stages, n);
    if (size != want) {
        throw Error(strfmt("session payload: %llu bytes, expected %llu for %lld tokens",
                           static_cast<unsigned long long>(size),
                           static_cast<unsigned long long>(want), static_cast<long long>(n)));
    }

    std::vector<int32_t> toks(static_cast<size_t>(n));
    in.bytes(toks.data(), toks.size() * sizeof(int32_t), "token ids");
    for (size_t i = 0; i < toks.size(); ++i) {
        if (static_cast<uint32_t>(toks[i]) >= hp.n_vocab) {
            throw Error(strfmt("session payload: token %zu has id %u, outside the vocabulary of %u",
                               i, static_cast<uint32_t>(toks[i]), hp.n_vocab));
        }
    }
    std::vector<float> lg(hp.n_vocab);
    in.bytes(lg.data(), lg.size() * sizeof(float), "logits");
    std::vector<int64_t> hist(history_len_of(hp, n));
    in.bytes(hist.data(), hist.size() * sizeof(int64_t), "Engram history");
    const std::vector<int32_t>& token_map = hp.v41.engram.token_map;
    for (size_t i = 0; i < hist.size(); ++i) {
        const size_t id = static_cast<size_t>(toks[i]);
        const int64_t live = id < token_map.size() ? token_map[id] : -2;
        if (hist[i] != -1 && hist[i] != live) {
            throw Error(
                strfmt("session payload: Engram history entry %zu is %lld, expected %lld "
                       "(the compressed id of token %zu) or -1 (dead)",
                       i, static_cast<long long>(hist[i]), static_cast<long long>(live), id));
        }
    }

    // Every field is consistent: load the state. Rows past what the payload brings are never
    // read (cache41::clear_small), so only the small state is reset.
    c.clear_small();
    c.runtime().published_index_k = slot;
    c.engram_history().assign(hist.begin(), hist.end());  // keeps the reserved capacity
    const int64_t w = window_rows_of(hp, n);
    const uint64_t win_row = static_cast<uint64_t>(quant::window_row_bytes(hp.n_head_dim));
    for (uint32_t b = 0; b < hp.n_layer + stages; ++b) {
        if (b >= c.n_blocks()) {
            in.skip(static_cast<uint64_t>(w) * win_row, "DSpark rings");
            continue;
        }
        layer41_state& s = c.layer(b);
        const ring_runs rr = ring_runs_of(n, w, s.ring.ne[1]);
        in.rows(be, s.ring, rr.first_slot, rr.first_len, "window rows");
        in.rows(be, s.ring, 0, rr.second_len, "window rows");
        if (b >= hp.n_layer || !hp.is_kv_source(b)) continue;
        const int64_t r = s.ratio;
        in.rows(be, s.comp_rows, 0, n / r, "compressed rows");
        in.rows(be, s.idx_rows, 0, n / r, "index rows");
        if (r >= 2) {
            in.rows(be, s.state_a, 0, n % r, "pending rows");
            in.rows(be, s.state_b, 0, n % r, "pending rows");
        }
    }
    MAGNETAR_ASSERT(in.left() == 0, "read_payload41: bytes left after the last block");
    *tokens = std::move(toks);
    *logits = std::move(lg);
}

}  // namespace

uint64_t payload41_size(const hparams& hp, const cache41& c, int64_t n) {
    return size_of(hp, stages_of(hp, c), n);
}

void write_payload41(backend::backend& be, const hparams& hp, const cache41& c, int64_t chunk,
                     std::span<const int32_t> tokens, std::span<const float> logits,
                     const byte_sink& sink) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n < 1) throw Error("session payload: an empty timeline has no payload");
    MAGNETAR_ASSERT(c.n_blocks() == hp.n_layer || c.n_blocks() == hp.n_layer + hp.n_dspark(),
                    "write_payload41: a cache of another model");
    MAGNETAR_ASSERT(n <= c.n_ctx(), "write_payload41: more tokens than the cache holds");
    MAGNETAR_ASSERT(logits.size() == hp.n_vocab, "write_payload41: logits row of the wrong size");
    // engram_history() and runtime() are not const; nothing is modified.
    cache41& cc = const_cast<cache41&>(c);
    const std::vector<int64_t>& hist = cc.engram_history();
    const uint64_t hist_len = history_len_of(hp, n);
    MAGNETAR_ASSERT(hist_len == 0 || hist.size() == hist_len,
                    "write_payload41: Engram history out of step with the tokens");
    const uint32_t stages = stages_of(hp, c);
    const int32_t slot = cc.runtime().published_index_k;
    payload_writer out(sink);
    const uint32_t fields[k_payload41_fields] = {
        k_payload41_magic,
        k_payload41_version,
        static_cast<uint32_t>(c.n_ctx()),
        static_cast<uint32_t>(chunk),
        static_cast<uint32_t>(n),
        hp.n_layer,
        stages,
        hp.n_layer + stages,
        hp.n_swa,
        window_rows_of(hp, n),
        hp.n_head_dim,
        hp.n_indexer_head_dim,
        static_cast<uint32_t>(quant::window_row_bytes(hp.n_head_dim)),
        static_cast<uint32_t>(quant::main_kv_row_bytes(hp.n_head_dim)),
        static_cast<uint32_t>(quant::index_key_row_bytes(hp.n_indexer_head_dim)),
        static_cast<uint32_t>(hp.v41.kv_sources.size()),
        hp.n_vocab,
        static_cast<uint32_t>(hist_len),
        slot < 0 ? k_no_slot : static_cast<uint32_t>(slot),
    };
    for (uint32_t v : fields) out.u32(v);
    for (uint32_t v : source_table(hp, n)) out.u32(v);
    out.bytes(tokens.data(), tokens.size() * sizeof(int32_t));
    out.bytes(logits.data(), logits.size() * sizeof(float));
    out.bytes(hist.data(), static_cast<size_t>(hist_len) * sizeof(int64_t));
    const int64_t w = window_rows_of(hp, n);
    for (uint32_t b = 0; b < hp.n_layer + stages; ++b) {
        const layer41_state& s = c.layer(b);
        const ring_runs rr = ring_runs_of(n, w, s.ring.ne[1]);
        out.rows(be, s.ring, rr.first_slot, rr.first_len);
        out.rows(be, s.ring, 0, rr.second_len);
        if (b >= hp.n_layer || !hp.is_kv_source(b)) continue;
        const int64_t r = s.ratio;
        out.rows(be, s.comp_rows, 0, n / r);
        out.rows(be, s.idx_rows, 0, n / r);
        if (r >= 2) {
            out.rows(be, s.state_a, 0, n % r);
            out.rows(be, s.state_b, 0, n % r);
        }
    }
    MAGNETAR_ASSERT(out.written() == size_of(hp, stages, n), "write_payload41: size mismatch");
}

void read_payload41(backend::backend& be, const hparams& hp, cache41& c, const byte_source& source,
                    uint64_t size, std::vector<int32_t>* tokens, std::vector<float>* logits) {
    try {
        read_impl(be, hp, c, source, size, tokens, logits);
    } catch (...) {
        c.clear_small();
        throw;
    }
}

}  // namespace magnetar::kv
