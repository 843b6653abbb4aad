// The session payload: the complete timeline state as one byte stream, shared by in-memory
// snapshots, the disk KV cache and bench snapshots (protocol §6.4.3 layout, generalised to the
// model's dimensions).
//
// Layout (little-endian): 13 u32 fields (magic "DSV4", version 1, session context, prefill
// chunk, raw ring capacity, raw window, compressed capacity, token count n, layer count,
// head dim, indexer head dim, vocabulary, raw rows per layer = min(n, window)); u32[n] token
// ids; f32[n_vocab] next-token logits; u32[n_layer] compressed-row counts; u32[n_layer]
// indexer-row counts; then per layer: the raw rows of positions [n - w, n) oldest first,
// and for compressed layers the compressed rows, the compressor frontier (values, scores) and
// for ratio 4 the indexer rows and the indexer frontier (values, scores). The MTP block's
// state is not part of it (docs/engine.md).
//
// The layout splits into a head (the fields, tokens, logits and row counts: payload_head_size)
// and one section per layer in layer order (payload_layer_size), so a pipeline stage
// (src/dist) writes and reads the sections of its own layers and rank 0 assembles the rest.
//
// Owns: that layout, its size and its checks. Does not own: file headers, checksums and
// naming (the disk KV store), or the session bookkeeping around a load.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "magnetar/session.h"
#include "model/hparams.h"

namespace magnetar::kv {

inline constexpr uint32_t k_payload_magic = 0x34565344u;  // "DSV4"
inline constexpr uint32_t k_payload_version = 1;
inline constexpr int k_payload_fields = 13;

// Bytes of the payload of an n-token timeline of a session with context n_ctx.
uint64_t payload_size(const hparams& hp, int64_t n_tokens);

// Bytes of the head, and of layer il's section, of an n-token payload.
uint64_t payload_head_size(const hparams& hp, int64_t n_tokens);
uint64_t payload_layer_size(const hparams& hp, int64_t n_tokens, uint32_t il);

// Writes the payload of `c` (tokens.size() evaluated tokens, `logits` the next-token row).
// chunk: the session's prefill chunk (recorded, see read_payload). Throws magnetar::Error when
// the sink fails.
void write_payload(backend::backend& be, const hparams& hp, const cache& c, int64_t chunk,
                   std::span<const int32_t> tokens, std::span<const float> logits,
                   const byte_sink& sink);

// Loads a payload of exactly `size` bytes into `c` (cleared first), returning the tokens and
// the logits row. Every field is checked before any state is touched where possible; on any
// failure it throws magnetar::Error naming the field (expected vs got), and `c` must then be
// treated as empty. Unlike ds4 a different prefill chunk is accepted: this engine's results
// do not depend on the chunking.
void read_payload(backend::backend& be, const hparams& hp, cache& c, const byte_source& source,
                  uint64_t size, std::vector<int32_t>* tokens, std::vector<float>* logits);

// The pieces of write_payload: the head (c: any cache of the session, for its context and raw
// ring capacity), then the sections of layers [l0, l1) of an n-token timeline, which `c` must
// hold. Throws magnetar::Error when the sink fails.
void write_payload_head(const hparams& hp, const cache& c, int64_t chunk,
                        std::span<const int32_t> tokens, std::span<const float> logits,
                        const byte_sink& sink);
void write_payload_layers(backend::backend& be, const hparams& hp, const cache& c, int64_t n_tokens,
                          uint32_t l0, uint32_t l1, const byte_sink& sink);

// The pieces of read_payload. read_payload_head reads and checks the head of a payload of
// `size` bytes for a session with c's context (every check of read_payload that needs no layer
// data, the total size included); it touches no state. read_payload_layers loads the sections
// of layers [l0, l1) of an n-token timeline into `c` (the caller clears it first).
void read_payload_head(const hparams& hp, const cache& c, const byte_source& source, uint64_t size,
                       std::vector<int32_t>* tokens, std::vector<float>* logits);
void read_payload_layers(backend::backend& be, const hparams& hp, cache& c, int64_t n_tokens,
                         uint32_t l0, uint32_t l1, const byte_source& source);

}  // namespace magnetar::kv
