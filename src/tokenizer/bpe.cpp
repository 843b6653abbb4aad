// Merge table construction, the fast merge loops (rank array, segment tree) and the reference.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "tokenizer/byte_level.h"

namespace magnetar {

namespace {

// Splits "left right" at its single space; false if the string is not of that form.
bool split_merge(std::string_view m, std::string_view* left, std::string_view* right) {
    const size_t sp = m.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= m.size()) return false;
    if (m.find(' ', sp + 1) != std::string_view::npos) return false;
    *left = m.substr(0, sp);
    *right = m.substr(sp + 1);
    return true;
}

[[noreturn]] void bad_merge(size_t rank, const std::string& m) {
    throw Error(
        strfmt("tokenizer: merge %zu (\"%s\") is not of the form \"left right\"", rank, m.c_str()));
}

}  // namespace

bpe_merges::bpe_merges(const token_map& vocab, int32_t n_vocab,
                       const std::vector<std::string>& merges)
    : n_vocab_(n_vocab), n_merges_(merges.size()) {
    // Strings that take part in merges but are not emittable get ids past the vocabulary.
    token_map synthetic;
    auto sym_of = [&](std::string_view s) -> int32_t {
        if (auto it = vocab.find(s); it != vocab.end()) return it->second;
        if (auto it = synthetic.find(s); it != synthetic.end()) return it->second;
        const int32_t id = n_vocab_ + static_cast<int32_t>(synthetic.size());
        synthetic.emplace(std::string(s), id);
        return id;
    };
    for (int b = 0; b < 256; ++b)
        byte_sym_[b] = sym_of(byte_level::byte_to_utf8(static_cast<uint8_t>(b)));

    // First resolve every merge to symbol ids (this also numbers the synthetic symbols), then
    // size the packed slots: sym_bits for each side, rank_bits so that no slot is all ones.
    struct resolved {
        int32_t a, b, merged;
    };
    std::vector<resolved> res(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        std::string_view left, right;
        if (!split_merge(merges[rank], &left, &right)) bad_merge(rank, merges[rank]);
        joined.assign(left);
        joined.append(right);
        res[rank] = {sym_of(left), sym_of(right), sym_of(joined)};
    }
    const auto n_sym = static_cast<uint64_t>(n_vocab_) + synthetic.size();
    sym_bits_ = std::bit_width(n_sym);
    rank_bits_ = std::bit_width(static_cast<uint64_t>(merges.size()));
    if (2 * sym_bits_ + rank_bits_ > 64) {
        throw Error(strfmt("tokenizer: %llu symbols and %zu merges do not fit the merge table",
                           static_cast<unsigned long long>(n_sym), merges.size()));
    }
    rank_mask_ = rank_bits_ == 0 ? 0 : (~0ull >> (64 - rank_bits_));
    const size_t cap = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
    table_.assign(cap, kEmpty);
    mask_ = cap - 1;
    shift_ = 64 - std::countr_zero(cap);
    merged_.resize(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const uint64_t pair =
            (static_cast<uint64_t>(res[rank].a) << sym_bits_) | static_cast<uint64_t>(res[rank].b);
        size_t i = (pair * 0x9E3779B97F4A7C15ull) >> shift_;
        while (table_[i] != kEmpty && (table_[i] >> rank_bits_) != pair) i = (i + 1) & mask_;
        table_[i] = (pair << rank_bits_) | rank;  // a later duplicate of a pair wins
        merged_[rank] = res[rank].merged;
    }
    byte_pair_rank_.resize(256 * 256);
    for (int b0 = 0; b0 < 256; ++b0) {
        for (int b1 = 0; b1 < 256; ++b1)
            byte_pair_rank_[b0 * 256 + b1] = find(byte_sym_[b0], byte_sym_[b1]);
    }
    n_synthetic_ = synthetic.size();
}

void bpe_merges::emit(int32_t sym, std::string_view bytes, std::vector<int32_t>& out) const {
    if (sym < n_vocab_) {
        out.push_back(sym);
        return;
    }
    for (unsigned char c : bytes) {
        if (byte_sym_[c] < n_vocab_) out.push_back(byte_sym_[c]);
    }
}

void bpe_merges::encode_piece(std::string_view piece, scratch& s, std::vector<int32_t>& out) const {
    const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
    const int32_t n = static_cast<int32_t>(piece.size());
    if (n == 0) return;
    if (n == 1) {
        emit(byte_sym_[p[0]], piece, out);
        return;
    }
    if (n == 2) {
        const uint32_t r = byte_pair_rank_[p[0] * 256 + p[1]];
        if (r != kNoRank) {
            emit(merged_[r], piece, out);
        } else {
            emit(byte_sym_[p[0]], piece.substr(0, 1), out);
            emit(byte_sym_[p[1]], piece.substr(1), out);
        }
        return;
    }
    if (n <= kSmallPiece) {
        encode_small(piece, out);
        return;
    }
    // Symbols are indexed by the byte offset where they start; a merged symbol keeps the index
    // of its left part, so index order is text order. A min segment tree over the symbol
    // indices holds (rank << 32 | index) of the pair starting at each live symbol (all ones if
    // none): its root is the next merge, lowest rank and leftmost on ties, and every merge
    // changes three leaves. Unlike a heap it never holds stale entries, and an update stops
    // as soon as a node's minimum is unchanged, which is usually after a level or two.
    size_t size = 1;
    while (size < static_cast<size_t>(n)) size <<= 1;
    s.sym.resize(static_cast<size_t>(n));
    s.next.resize(static_cast<size_t>(n));
    s.prev.resize(static_cast<size_t>(n));
    s.tree.assign(2 * size, kNoPair);
    for (int32_t i = 0; i < n; ++i) {
        s.sym[i] = byte_sym_[p[i]];
        s.next[i] = i + 1 < n ? i + 1 : -1;
        s.prev[i] = i - 1;
    }
    uint64_t* tree = s.tree.data();
    auto key = [](uint32_t r, int32_t i) -> uint64_t {
        return r == kNoRank ? kNoPair : (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(i);
    };
    auto leaf = [&](int32_t i) -> uint64_t {
        return s.next[i] < 0 ? kNoPair : key(find(s.sym[i], s.sym[s.next[i]]), i);
    };
    auto update = [&](int32_t i, uint64_t value) {
        size_t k = size + static_cast<size_t>(i);
        tree[k] = value;
        for (k >>= 1; k >= 1; k >>= 1) {
            const uint64_t m = std::min(tree[2 * k], tree[2 * k + 1]);
            if (tree[k] == m) break;  // nothing above changes either
            tree[k] = m;
        }
    };
    for (int32_t i = 0; i + 1 < n; ++i) {
        tree[size + static_cast<size_t>(i)] = key(byte_pair_rank_[p[i] * 256 + p[i + 1]], i);
    }
    for (size_t k = size - 1; k >= 1; --k) tree[k] = std::min(tree[2 * k], tree[2 * k + 1]);

    while (tree[1] != kNoPair) {
        const auto i = static_cast<int32_t>(tree[1] & 0xFFFFFFFFu);
        const int32_t j = s.next[i];
        s.sym[i] = merged_[tree[1] >> 32];
        s.next[i] = s.next[j];
        if (s.next[i] >= 0) {
            s.prev[s.next[i]] = i;
            prefetch(s.sym[i], s.sym[s.next[i]]);
        }
        if (s.prev[i] >= 0) prefetch(s.sym[s.prev[i]], s.sym[i]);
        update(j, kNoPair);
        update(i, leaf(i));
        if (s.prev[i] >= 0) update(s.prev[i], leaf(s.prev[i]));
    }
    for (int32_t i = 0; i >= 0; i = s.next[i]) {
        const int32_t end = s.next[i] >= 0 ? s.next[i] : n;
        emit(s.sym[i], piece.substr(static_cast<size_t>(i), static_cast<size_t>(end - i)), out);
    }
}

// Short pieces: the adjacent pairs' ranks sit in a small array that is scanned for its
// minimum, which beats tree bookkeeping when there are only a few symbols.
void bpe_merges::encode_small(std::string_view piece, std::vector<int32_t>& out) const {
    const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
    const int32_t n = static_cast<int32_t>(piece.size());
    int32_t sym[kSmallPiece];
    int32_t start[kSmallPiece + 1];
    uint32_t rank[kSmallPiece];
    auto look = [&](int32_t i) { rank[i] = find(sym[i], sym[i + 1]); };
    for (int32_t i = 0; i < n; ++i) {
        sym[i] = byte_sym_[p[i]];
        start[i] = i;
    }
    start[n] = n;
    int32_t m = n;  // live symbols
    for (int32_t i = 0; i + 1 < m; ++i) rank[i] = byte_pair_rank_[p[i] * 256 + p[i + 1]];
    while (m > 1) {
        int32_t best = 0;
        for (int32_t i = 1; i + 1 < m; ++i) {
            if (rank[i] < rank[best]) best = i;  // strict: the leftmost of equal ranks wins
        }
        if (rank[best] == kNoRank) break;
        sym[best] = merged_[rank[best]];
        const auto tail = static_cast<size_t>(m - best - 2);
        std::memmove(&sym[best + 1], &sym[best + 2], tail * sizeof(int32_t));
        std::memmove(&start[best + 1], &start[best + 2], (tail + 1) * sizeof(int32_t));
        if (tail > 0) {  // pair ranks of the symbols after the merged one move down too
            std::memmove(&rank[best + 1], &rank[best + 2], (tail - 1) * sizeof(uint32_t));
        }
        --m;
        if (best > 0) prefetch(sym[best - 1], sym[best]);
        if (best + 1 < m) prefetch(sym[best], sym[best + 1]);
        if (best > 0) look(best - 1);
        if (best + 1 < m) look(best);
    }
    for (int32_t i = 0; i < m; ++i) {
        emit(sym[i],
             piece.substr(static_cast<size_t>(start[i]),
                          static_cast<size_t>(start[i + 1] - start[i])),
             out);
    }
}

// ---------------------------------------------------------------------------------------------
// Reference loop (spec protocol.md §1.5, verbatim)
// ---------------------------------------------------------------------------------------------

bpe_reference::bpe_reference(const token_map& vocab, const std::vector<std::string>& merges)
    : vocab_(vocab) {
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        std::string_view left, right;
        if (!split_merge(merges[rank], &left, &right)) bad_merge(rank, merges[rank]);
        rank_[merges[rank]] = static_cast<uint32_t>(rank);
    }
}

std::vector<int32_t> bpe_reference::encode_piece(std::string_view piece) const {
    std::vector<std::string> syms;
    for (unsigned char c : piece) syms.emplace_back(byte_level::byte_to_utf8(c));
    for (;;) {
        size_t best = 0;
        uint32_t best_rank = 0;
        bool found = false;
        for (size_t i = 0; i + 1 < syms.size(); ++i) {
            auto it = rank_.find(syms[i] + " " + syms[i + 1]);
            if (it != rank_.end() && (!found || it->second < best_rank)) {
                best = i;
                best_rank = it->second;
                found = true;
            }
        }
        if (!found) break;
        syms[best] += syms[best + 1];
        syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<int32_t> out;
    for (const auto& s : syms) {
        if (auto it = vocab_.find(s); it != vocab_.end()) {
            out.push_back(it->second);
            continue;
        }
        std::string bytes;
        byte_level::decode(s, bytes);
        for (unsigned char c : bytes) {
            if (auto b = vocab_.find(byte_level::byte_to_utf8(c)); b != vocab_.end()) {
                out.push_back(b->second);
            }
        }
    }
    return out;
}

}  // namespace magnetar
