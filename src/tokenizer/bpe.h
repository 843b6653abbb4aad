// Rank-ordered byte-level BPE: the merge table and the merge loop that runs inside one piece.
//
// Owns: turning "left right" merge strings into an id-pair -> (rank, result) table, the fast
// merge loop (a rank array for short pieces, a min segment tree over adjacent symbol pairs for
// longer ones: O(n log n) per piece, so multi-kilobyte pieces such as base64 runs stay cheap)
// and its always-compiled twin bpe_reference, a literal transcription of the quadratic loop of
// spec protocol.md §1.5 that tests and the fuzzer compare against.
// Does not own: splitting text into pieces (pre_tokenizer.h) or special tokens (tokenizer.h).
//
// Semantics shared by both: start from one symbol per byte, repeatedly merge the adjacent pair
// with the lowest rank (leftmost on ties), emit the id of each final symbol. A symbol whose
// string is not an emittable token (possible only with an inconsistent merge table) is emitted
// as the tokens of its single bytes, skipping bytes that have none. When a pair appears twice in
// the merge list the later rank wins, as in the HF tokenizers.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace magnetar {

struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Token string (byte-level form) -> id, with lookups by string_view.
using token_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

class bpe_merges {
  public:
    // Reusable buffers of the merge loop; one per thread (or per encode call).
    struct scratch {
        std::vector<int32_t> sym, next, prev;
        std::vector<uint64_t> tree;
    };

    // `vocab` holds every token BPE may emit; ids of the vocabulary are < n_vocab. Throws
    // magnetar::Error naming the rank of a malformed merge string.
    bpe_merges(const token_map& vocab, int32_t n_vocab, const std::vector<std::string>& merges);

    // Appends the token ids of one piece (raw bytes) to `out`.
    void encode_piece(std::string_view piece, scratch& s, std::vector<int32_t>& out) const;

    size_t n_merges() const { return n_merges_; }
    // Merge strings (sides or results) that are not emittable tokens; 0 for a consistent table.
    size_t n_synthetic() const { return n_synthetic_; }

  private:
    static constexpr uint64_t kEmpty = ~0ull;   // free table slot
    static constexpr uint64_t kNoPair = ~0ull;  // segment-tree leaf of a symbol with no merge
    static constexpr uint32_t kNoRank = UINT32_MAX;

    // Rank of merging symbols a and b, or kNoRank. Slots pack (a, b, rank) into 64 bits, so the
    // table for DeepSeek's 127741 merges takes 2 MiB: these lookups are the hot memory accesses,
    // and callers with several independent lookups prefetch() them all first.
    uint64_t pair_of(int32_t a, int32_t b) const {
        return (static_cast<uint64_t>(a) << sym_bits_) | static_cast<uint64_t>(b);
    }
    size_t home(uint64_t pair) const { return (pair * 0x9E3779B97F4A7C15ull) >> shift_; }
    void prefetch(int32_t a, int32_t b) const { __builtin_prefetch(&table_[home(pair_of(a, b))]); }
    uint32_t find(int32_t a, int32_t b) const {
        const uint64_t pair = pair_of(a, b);
        for (size_t i = home(pair);; i = (i + 1) & mask_) {
            const uint64_t slot = table_[i];
            if ((slot >> rank_bits_) == pair) return static_cast<uint32_t>(slot & rank_mask_);
            if (slot == kEmpty) return kNoRank;
        }
    }
    void emit(int32_t sym, std::string_view bytes, std::vector<int32_t>& out) const;
    void encode_small(std::string_view piece, std::vector<int32_t>& out) const;

    static constexpr int32_t kSmallPiece = 8;  // longer pieces use the segment tree

    int32_t n_vocab_ = 0;
    int32_t byte_sym_[256] = {};
    std::vector<uint64_t> table_;
    std::vector<int32_t> merged_;  // rank -> symbol the merge produces
    // Rank of merging the symbols of two raw bytes, [b0 * 256 + b1]: the first lookups of every
    // piece, from a 256 KiB table that stays in cache.
    std::vector<uint32_t> byte_pair_rank_;
    int sym_bits_ = 0;
    int rank_bits_ = 0;
    uint64_t rank_mask_ = 0;
    size_t mask_ = 0;
    int shift_ = 0;
    size_t n_merges_ = 0;
    size_t n_synthetic_ = 0;
};

// Slow twin of bpe_merges::encode_piece with string symbols, for tests and the fuzzer.
class bpe_reference {
  public:
    bpe_reference(const token_map& vocab, const std::vector<std::string>& merges);
    std::vector<int32_t> encode_piece(std::string_view piece) const;

  private:
    const token_map& vocab_;
    std::unordered_map<std::string, uint32_t, string_hash, std::equal_to<>> rank_;
};

}  // namespace magnetar
