// Roofline accounting: the bytes one decoded token must read from memory, from the tensor
// directory of the model file and the hyper-parameters (docs/performance.md has the formulas).
//
// Owns: which weights a decode step reads (every non-expert weight once, one row of the
// embedding and of a hash-routing table, the routed experts the router selected, the indexer's
// query projections only once the indexer runs; for DeepSeek V4.1 also the Engram rows
// gathered, the index-key projection only when a compressor group completes, and the per-mode
// indexer of CSA2) and which cache rows its attention reads (V4: raw window, visible compressed
// rows, indexer rows as FP32; V4.1: window rings of packed FP8 rows, the top-k packed
// compressed rows and the packed index keys scored). Does not own: counting the selected
// experts (the caller taps `moe_sel`) or timing.
//
// The figures are what the forward pass must stream at least once per token; they ignore
// activations, scratch and the compressor frontiers / pending rows (small, cache-resident).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/catalogue.h"
#include "model/hparams.h"

namespace magnetar {

namespace gguf {
class reader;
}

// Cache bytes one decode step reads, by kind (all layers, MTP block included).
struct kv_read_bytes {
    uint64_t raw = 0;    // sliding-window rows (V4.1: the packed FP8 window-ring rows)
    uint64_t comp = 0;   // main compressed rows attended
    uint64_t index = 0;  // indexer rows scored (V4.1: packed index keys)
    uint64_t total() const { return raw + comp + index; }
};

// Cache rows one decode step's attention reads, by kind (all layers, MTP block included): the
// row counts behind kv_read_bytes.
struct kv_read_rows {
    uint64_t raw = 0;    // window rows attended
    uint64_t comp = 0;   // compressed rows attended
    uint64_t index = 0;  // index keys scored
};

// Bytes of one block (main layer or MTP block) that a decode step reads.
struct block_bytes {
    uint32_t ratio = 0;
    uint64_t fixed = 0;      // read on every token
    uint64_t indexer_q = 0;  // indexer query projections: read only while the indexer scores
    uint64_t expert = 0;     // one routed expert: gate + up + down rows of one expert id
    uint64_t all_experts = 0;
    // DeepSeek V4.1 only:
    layer_mode mode = layer_mode::swa_only;
    uint64_t on_emit = 0;  // Full layers: compressor norm + index-key projection and norm, read
                           // when a compressor group completes ((p+1) mod r == 0)
    uint64_t gather = 0;   // Engram layers: the table rows gathered per token (inside `fixed`)
    // Multiply-adds per evaluated token in the matrices counted above (a matrix's elements,
    // each applied once to the token's activations; norms, biases, sinks, position embeddings
    // and gathered rows are not products and do not count): always, while the indexer scores,
    // per routed expert, and when a V4.1 compressor group completes.
    uint64_t fixed_macs = 0;
    uint64_t indexer_q_macs = 0;
    uint64_t expert_macs = 0;
    uint64_t on_emit_macs = 0;
};

class roofline {
  public:
    // One entry per catalogue tensor present in the file, with its byte size and the bytes of
    // one row (ne[0] elements). Tests build it from a catalogue without a file.
    struct tensor_bytes {
        tensor_spec spec;
        uint64_t n_bytes = 0;
        uint64_t row_bytes = 0;
    };

    // with_mtp: the MTP block is present and run on every evaluated token (the engine does).
    // For V4.1 it must be false: sessions do not run the DSpark stages, which are not counted.
    roofline(const hparams& hp, const std::vector<tensor_bytes>& tensors, bool with_mtp);
    // From a GGUF file (main file; the MTP block is taken from it when present; a V4.1 file's
    // DSpark stages are left out).
    static roofline from_file(const gguf::reader& file);

    const hparams& hp() const { return hp_; }
    bool has_mtp() const { return with_mtp_; }
    // Main layers, then the MTP block (index n_layer) when present.
    const std::vector<block_bytes>& blocks() const { return blocks_; }

    // Embedding row(s), output HC collapse, output norm and head: per token, independent of
    // the layer count (the part a per-layer projection must subtract).
    uint64_t global_bytes() const { return global_; }
    // Whether the indexer of a ratio-4 layer scores at position pos (more compressed rows
    // visible than its top-k budget). DeepSeek V4 only.
    bool indexer_active(int64_t pos) const;
    // DeepSeek V4.1: index keys backbone block b scores at position pos, 0 when it does not
    // score: for an index source (Full or Reindex layer) the keys it may pick from -- every
    // visible entry, or for a layer masked by candidate blocks only the entries in the pool --
    // when they outnumber the top-k budget (below that every one is picked, whatever the
    // scores).
    uint64_t scored_keys(uint32_t b, int64_t pos) const;
    // Non-expert weight bytes of a decode step at position pos (all blocks and the globals).
    uint64_t dense_bytes(int64_t pos) const;
    // Weight bytes of a decode step at pos that selected n_distinct[b] experts in block b
    // (size blocks().size()).
    uint64_t weight_bytes(int64_t pos, const std::vector<uint32_t>& n_distinct) const;
    // Same with exactly n_expert_used distinct experts per block (no repeats).
    uint64_t weight_bytes_nominal(int64_t pos) const;
    // Cache bytes the attention of a decode step at position pos reads (V4: FP32 cache rows;
    // V4.1: the packed rows of spec v41.md §5.4).
    kv_read_bytes kv_bytes(int64_t pos) const;
    // The rows behind kv_bytes(pos).
    kv_read_rows kv_rows(int64_t pos) const;
    // Multiply-adds of the attention of one token at position pos: scores and weighted sum over
    // every row attended (2 x heads x head dim per row) and the indexer's scores over the keys
    // it scores (indexer heads x indexer head dim per key).
    uint64_t attention_macs(int64_t pos) const;
    // Floating-point operations (2 per multiply-add) of evaluating the token at position pos
    // inside a prefill: every block's matrices with n_expert_used routed experts, the indexer's
    // query projections while it scores, the V4.1 emit-only matrices when the token completes
    // a group, and attention_macs(pos). The head and the output HC collapse are not counted:
    // a prefill runs them for one row per sync, not per token. Element-wise work (norms, HC
    // Sinkhorn, activations, RoPE) is left out, so this is a lower bound of the arithmetic.
    double prefill_flops(int64_t pos) const;
    // Everything in the files (for reference: what a dense read of the model would be).
    uint64_t file_weight_bytes() const { return file_bytes_; }

  private:
    kv_read_rows kv_rows_v41(int64_t pos) const;

    hparams hp_;
    bool with_mtp_ = false;
    std::vector<block_bytes> blocks_;
    uint64_t global_ = 0;
    uint64_t file_bytes_ = 0;
};

}  // namespace magnetar
