// Memo of piece -> token ids for one encode call.
//
// Owns: a flat open-addressing table with the keys and ids in two arenas, so a lookup is one
// hash of the piece, one probe and one memcmp, with no allocation per entry. Words repeat a
// lot in real text, and a hit skips the merge loop entirely. Bounded: pieces longer than
// kMaxPiece are never stored and insertion stops after kMaxEntries.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace magnetar {

class piece_cache {
  public:
    static constexpr size_t kMaxPiece = 64;
    static constexpr size_t kMaxEntries = size_t{1} << 15;

    // Ids stored for `piece`, or an empty span (no piece encodes to zero tokens).
    std::span<const int32_t> find(std::string_view piece, uint64_t h) const {
        if (table_.empty()) return {};
        const auto tag = static_cast<uint32_t>(h >> 32);
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const entry& e = table_[i];
            if (e.key_len == 0) return {};
            if (e.tag == tag && e.key_len == piece.size() &&
                std::memcmp(keys_.data() + e.key_off, piece.data(), piece.size()) == 0) {
                return {ids_.data() + e.ids_off, e.n_ids};
            }
        }
    }

    void insert(std::string_view piece, uint64_t h, std::span<const int32_t> ids) {
        if (piece.empty() || piece.size() > kMaxPiece || count_ >= kMaxEntries) return;
        if ((count_ + 1) * 2 > table_.size()) grow();
        size_t i = h & mask_;
        while (table_[i].key_len != 0) i = (i + 1) & mask_;
        table_[i] = entry{static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(keys_.size()),
                          static_cast<uint32_t>(ids_.size()), static_cast<uint8_t>(piece.size()),
                          static_cast<uint8_t>(ids.size())};
        keys_.append(piece);
        ids_.insert(ids_.end(), ids.begin(), ids.end());
        ++count_;
    }

    // 64-bit hash of a short byte string, eight bytes at a time.
    static uint64_t hash(std::string_view s) {
        uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
        const char* p = s.data();
        size_t n = s.size();
        for (; n >= 8; p += 8, n -= 8) {
            uint64_t v;
            std::memcpy(&v, p, 8);
            h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
            h ^= h >> 31;
        }
        if (n != 0) {
            uint64_t v = 0;
            std::memcpy(&v, p, n);
            h = (h ^ v) * 0x94D049BB133111EBull;
            h ^= h >> 29;
        }
        h *= 0xBF58476D1CE4E5B9ull;
        return h ^ (h >> 32);
    }

  private:
    // 16 bytes: the table is probed once per piece, so its cache footprint matters.
    struct entry {
        uint32_t tag;  // high half of the hash; the low bits chose the slot
        uint32_t key_off;
        uint32_t ids_off;
        uint8_t key_len;  // 0: free slot
        uint8_t n_ids;
    };

    void grow() {
        std::vector<entry> old = std::move(table_);
        table_.assign(old.empty() ? 1024 : old.size() * 2, entry{});
        mask_ = table_.size() - 1;
        for (const entry& e : old) {
            if (e.key_len == 0) continue;
            size_t i = hash(std::string_view(keys_.data() + e.key_off, e.key_len)) & mask_;
            while (table_[i].key_len != 0) i = (i + 1) & mask_;
            table_[i] = e;
        }
    }

    std::vector<entry> table_;
    size_t mask_ = 0;
    size_t count_ = 0;
    std::string keys_;
    std::vector<int32_t> ids_;
};

}  // namespace magnetar
