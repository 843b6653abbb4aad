#include "kv/payload.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "kv/payload_io.h"

namespace magnetar::kv {

namespace {

uint32_t raw_rows_of(const hparams& hp, int64_t n) {
    return static_cast<uint32_t>(std::min<int64_t>(n, hp.n_swa));
}

}  // namespace

uint64_t payload_head_size(const hparams& hp, int64_t n) {
    return 4ull * k_payload_fields + 4ull * static_cast<uint64_t>(n) + 4ull * hp.n_vocab +
           8ull * hp.n_layer;
}

uint64_t payload_layer_size(const hparams& hp, int64_t n, uint32_t il) {
    const uint64_t hd = hp.n_head_dim;
    const uint64_t id = hp.n_indexer_head_dim;
    const uint64_t un = static_cast<uint64_t>(n);
    uint64_t b = 4ull * raw_rows_of(hp, n) * hd;
    const uint32_t r = hp.compress_ratio(il);
    if (r == 0) return b;
    const uint64_t c = hparams::coff(r);
    b += 4ull * (un / r) * hd + 2ull * 4ull * (c * r) * (c * hd);
    if (r == 4) b += 4ull * (un / 4) * id + 2ull * 4ull * 8ull * (2ull * id);
    return b;
}

uint64_t payload_size(const hparams& hp, int64_t n) {
    uint64_t b = payload_head_size(hp, n);
    for (uint32_t il = 0; il < hp.n_layer; ++il) b += payload_layer_size(hp, n, il);
    return b;
}

void write_payload_head(const hparams& hp, const cache& c, int64_t chunk,
                        std::span<const int32_t> tokens, std::span<const float> logits,
                        const byte_sink& sink) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    MAGNETAR_ASSERT(logits.size() == hp.n_vocab, "write_payload: logits row of the wrong size");
    cache& cc = const_cast<cache&>(c);  // layer() is not const; nothing is modified
    const int64_t raw_cap = cc.layer(c.layer_begin()).raw.ne[1];
    payload_writer out(sink);
    const uint32_t fields[k_payload_fields] = {
        k_payload_magic,
        k_payload_version,
        static_cast<uint32_t>(c.n_ctx()),
        static_cast<uint32_t>(chunk),
        static_cast<uint32_t>(raw_cap),
        static_cast<uint32_t>(std::min<int64_t>(hp.n_swa, c.n_ctx())),
        static_cast<uint32_t>(c.n_ctx() / 4),
        static_cast<uint32_t>(n),
        hp.n_layer,
        hp.n_head_dim,
        hp.n_indexer_head_dim,
        hp.n_vocab,
        raw_rows_of(hp, n),
    };
    for (uint32_t f : fields) out.u32(f);
    out.bytes(tokens.data(), tokens.size() * sizeof(int32_t));
    out.bytes(logits.data(), logits.size() * sizeof(float));
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint32_t r = hp.compress_ratio(il);
        out.u32(r ? static_cast<uint32_t>(n / r) : 0u);
    }
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        out.u32(hp.compress_ratio(il) == 4 ? static_cast<uint32_t>(n / 4) : 0u);
    }
    MAGNETAR_ASSERT(out.written() == payload_head_size(hp, n), "write_payload: head size mismatch");
}

void write_payload_layers(backend::backend& be, const hparams& hp, const cache& c, int64_t n,
                          uint32_t l0, uint32_t l1, const byte_sink& sink) {
    MAGNETAR_ASSERT(l0 >= c.layer_begin() && l1 <= c.layer_end() && l0 <= l1,
                    "write_payload: layers not held by this cache");
    cache& cc = const_cast<cache&>(c);  // layer() is not const; nothing is modified
    payload_writer out(sink);
    uint64_t want = 0;
    for (uint32_t il = l0; il < l1; ++il) {
        const layer_state& s = cc.layer(il);
        const int64_t raw_cap = s.raw.ne[1];
        const int64_t w = raw_rows_of(hp, n);
        // Raw rows in logical order: position p lives in ring slot p mod raw_cap.
        for (int64_t p = n - w; p < n; ++p) out.rows(be, s.raw, p % raw_cap, 1);
        want += payload_layer_size(hp, n, il);
        if (s.ratio == 0) continue;
        out.rows(be, s.comp_rows, 0, n / s.ratio);
        out.whole(be, s.comp_kv);
        out.whole(be, s.comp_score);
        if (s.ratio == 4) {
            out.rows(be, s.idx_rows, 0, n / 4);
            out.whole(be, s.idx_kv);
            out.whole(be, s.idx_score);
        }
    }
    MAGNETAR_ASSERT(out.written() == want, "write_payload: layer size mismatch");
}

void write_payload(backend::backend& be, const hparams& hp, const cache& c, int64_t chunk,
                   std::span<const int32_t> tokens, std::span<const float> logits,
                   const byte_sink& sink) {
    write_payload_head(hp, c, chunk, tokens, logits, sink);
    write_payload_layers(be, hp, c, static_cast<int64_t>(tokens.size()), 0, hp.n_layer, sink);
}

void read_payload_head(const hparams& hp, const cache& c, const byte_source& source, uint64_t size,
                       std::vector<int32_t>* tokens, std::vector<float>* logits) {
    payload_reader in(source, size);
    uint32_t f[k_payload_fields];
    static const char* const names[k_payload_fields] = {"magic",
                                                        "version",
                                                        "context",
                                                        "prefill chunk",
                                                        "raw ring capacity",
                                                        "raw window",
                                                        "compressed capacity",
                                                        "token count",
                                                        "layer count",
                                                        "head dim",
                                                        "indexer head dim",
                                                        "vocabulary",
                                                        "raw rows"};
    for (int i = 0; i < k_payload_fields; ++i) f[i] = in.u32(names[i]);
    auto expect = [&](int i, uint64_t want) {
        if (f[i] != want)
            throw Error(strfmt("session payload: %s is %u, expected %llu", names[i], f[i],
                               static_cast<unsigned long long>(want)));
    };
    expect(0, k_payload_magic);
    expect(1, k_payload_version);
    expect(8, hp.n_layer);
    expect(9, hp.n_head_dim);
    expect(10, hp.n_indexer_head_dim);
    expect(11, hp.n_vocab);
    const int64_t n = f[7];
    if (f[2] > c.n_ctx() || n > c.n_ctx() || n < 1)
        throw Error(
            strfmt("session payload: %lld tokens of a %u-token context do not fit a "
                   "session of %lld",
                   static_cast<long long>(n), f[2], static_cast<long long>(c.n_ctx())));
    expect(5, std::min<int64_t>(hp.n_swa, f[2]));
    expect(12, raw_rows_of(hp, n));
    const uint64_t want = payload_size(hp, n);
    if (size != want)
        throw Error(strfmt("session payload: %llu bytes, expected %llu for %lld tokens",
                           static_cast<unsigned long long>(size),
                           static_cast<unsigned long long>(want), static_cast<long long>(n)));

    tokens->resize(static_cast<size_t>(n));
    in.bytes(tokens->data(), tokens->size() * sizeof(int32_t), "token ids");
    for (size_t i = 0; i < tokens->size(); ++i) {
        if ((*tokens)[i] < 0 || static_cast<uint32_t>((*tokens)[i]) >= hp.n_vocab)
            throw Error(strfmt("session payload: token %zu has id %d, outside the vocabulary", i,
                               (*tokens)[i]));
    }
    logits->resize(hp.n_vocab);
    in.bytes(logits->data(), logits->size() * sizeof(float), "logits");
    for (int pass = 0; pass < 2; ++pass) {
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            const uint32_t r = hp.compress_ratio(il);
            const uint32_t got = in.u32(pass == 0 ? "compressed-row counts" : "indexer-row counts");
            const uint32_t exp = pass == 0 ? (r ? static_cast<uint32_t>(n / r) : 0u)
                                           : (r == 4 ? static_cast<uint32_t>(n / 4) : 0u);
            if (got != exp)
                throw Error(strfmt("session payload: layer %u has %u %s rows, expected %u", il, got,
                                   pass == 0 ? "compressed" : "indexer", exp));
        }
    }
    MAGNETAR_ASSERT(in.left() == size - payload_head_size(hp, n),
                    "read_payload: head size mismatch");
}

void read_payload_layers(backend::backend& be, const hparams& hp, cache& c, int64_t n, uint32_t l0,
                         uint32_t l1, const byte_source& source) {
    MAGNETAR_ASSERT(l0 >= c.layer_begin() && l1 <= c.layer_end() && l0 <= l1,
                    "read_payload: layers not held by this cache");
    uint64_t size = 0;
    for (uint32_t il = l0; il < l1; ++il) size += payload_layer_size(hp, n, il);
    payload_reader in(source, size);
    const int64_t w = raw_rows_of(hp, n);
    for (uint32_t il = l0; il < l1; ++il) {
        layer_state& s = c.layer(il);
        const int64_t raw_cap = s.raw.ne[1];
        for (int64_t p = n - w; p < n; ++p) in.rows(be, s.raw, p % raw_cap, 1, "raw rows");
        if (s.ratio == 0) continue;
        in.rows(be, s.comp_rows, 0, n / s.ratio, "compressed rows");
        in.whole(be, s.comp_kv, "compressor frontier");
        in.whole(be, s.comp_score, "compressor frontier");
        if (s.ratio == 4) {
            in.rows(be, s.idx_rows, 0, n / 4, "indexer rows");
            in.whole(be, s.idx_kv, "indexer frontier");
            in.whole(be, s.idx_score, "indexer frontier");
        }
    }
    MAGNETAR_ASSERT(in.left() == 0, "read_payload: bytes left after the last layer");
}

void read_payload(backend::backend& be, const hparams& hp, cache& c, const byte_source& source,
                  uint64_t size, std::vector<int32_t>* tokens, std::vector<float>* logits) {
    read_payload_head(hp, c, source, size, tokens, logits);
    c.clear_small();
    read_payload_layers(be, hp, c, static_cast<int64_t>(tokens->size()), 0, hp.n_layer, source);
}

}  // namespace magnetar::kv
