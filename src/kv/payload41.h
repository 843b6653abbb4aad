// The session payload of a DeepSeek V4.1 timeline (kv::cache41): the complete state as one byte
// stream, for in-memory snapshots and the disk KV cache (spec v41.md §5.4, "Persistence across
// restarts": compressed rows, index keys, window rings, compressor pending rows, Engram history
// and DSpark rings, so a resume is exact). Per-call lists (top-k, candidate blocks) are
// recomputed by every call and are not part of it.
//
// Layout (little-endian):
//   19 u32 fields: magic "DS41", version 1, session context, prefill chunk, token count n,
//     layer count, DSpark stages (0: no DSpark rings, else the model's stage count), block
//     count (layers + DSpark stages), window W, window rows w = min(n, W), head dim Dh, indexer
//     head dim DI, window row bytes, compressed row bytes, index key row bytes, KV source count
//     S, vocabulary V, Engram history length (n for a model with Engram layers, else 0), and
//     the attention runtime slot published_index_k (an i32: -1 = none, spec v41.md §9.2);
//   S x 5 u32, per KV source in kv_sources order: its block, its ratio r, its compressed-row
//     count floor(n / r), its index-key-row count floor(n / r), its pending-row count n mod r
//     (0 for r = 1);
//   u32[n] token ids; f32[V] next-token logits; i64[history length] Engram history (the
//     compressed id of every position, -1 for a dead image-span token);
//   per block (backbone layers, then the DSpark stages when recorded): the window rows of
//     positions [n - w, n) oldest first; and for a KV source its compressed rows [0, n / r), its
//     index-key rows [0, n / r) (all as the canonical packed bytes of §5.4), then for r >= 2 its
//     pending rows: the f32 values (state_a) then the f32 scores (state_b) of the live slots
//     [0, n mod r), the positions of the incomplete group. Slots past them carry no state (the
//     next group overwrites them before reading) and load as empty (values 0, scores -inf).
//
// The layout does not depend on the session context (rings hold W rows whatever the context),
// so a payload loads into any session whose context holds its n tokens. A payload with DSpark
// rings loads into a cache without them (the rings are skipped); one without DSpark rings is
// refused by a cache that holds them, since its drafts would read empty rings.
//
// Owns: that layout, its size and its checks. Does not own: file headers, checksums and naming
// (the disk KV store), or the session bookkeeping around a load.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/cache41.h"
#include "magnetar/session.h"
#include "model/hparams.h"

namespace magnetar::kv {

inline constexpr uint32_t k_payload41_magic = 0x31345344u;  // "DS41"
inline constexpr uint32_t k_payload41_version = 1;
inline constexpr int k_payload41_fields = 19;
inline constexpr int k_payload41_source_fields = 5;

// Bytes of the payload of an n-token timeline written from `c` (c decides whether the DSpark
// rings are recorded; its context does not matter).
uint64_t payload41_size(const hparams& hp, const cache41& c, int64_t n_tokens);

// Writes the payload of `c` (tokens.size() >= 1 evaluated tokens, `logits` the next-token row
// of V floats). chunk: the session's prefill chunk (recorded only: results do not depend on the
// chunking). Throws magnetar::Error when the sink fails or the timeline is empty.
void write_payload41(backend::backend& be, const hparams& hp, const cache41& c, int64_t chunk,
                     std::span<const int32_t> tokens, std::span<const float> logits,
                     const byte_sink& sink);

// Loads a payload of exactly `size` bytes into `c`, returning the tokens and the logits row.
// Every field, count, token id, history entry and the runtime slot is checked before any state
// is touched; on any failure it throws magnetar::Error naming the field (expected vs got) and
// leaves `c` cleared (an empty timeline). `c` may have any context of at least n tokens.
void read_payload41(backend::backend& be, const hparams& hp, cache41& c, const byte_source& source,
                    uint64_t size, std::vector<int32_t>* tokens, std::vector<float>* logits);

}  // namespace magnetar::kv
