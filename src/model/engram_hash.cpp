// Engram n-gram hashing and table-row decoding (spec v41 §3.9.2 - §3.9.4): see engram_hash.h.
#include "model/engram_hash.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "quant/fp8fp4.h"

namespace magnetar::engram {

namespace {

bool is_prime(int64_t n) {
    if (n < 2) return false;
    if (n % 2 == 0) return n == 2;
    for (int64_t d = 3; d <= n / d; d += 2) {
        if (n % d == 0) return false;
    }
    return true;
}

void check_shape(int max_ngram, int n_head) {
    if (max_ngram < 2 || max_ngram > 64) {
        throw Error("engram: max_ngram_size must be in [2, 64], got " + std::to_string(max_ngram));
    }
    if (n_head < 1 || n_head > 4096) {
        throw Error("engram: head_count must be in [1, 4096], got " + std::to_string(n_head));
    }
}

}  // namespace

std::vector<std::vector<int64_t>> bucket_primes(int64_t vocab_size, int n_layers, int max_ngram,
                                                int n_head) {
    check_shape(max_ngram, n_head);
    if (vocab_size < 1 || vocab_size > (int64_t{1} << 40)) {
        throw Error("engram: vocab_size (prime search start) must be in [1, 2^40], got " +
                    std::to_string(vocab_size));
    }
    if (n_layers < 0 || n_layers > 1024) {
        throw Error("engram: layer count must be in [0, 1024], got " + std::to_string(n_layers));
    }
    // The recipe restarts the search at vocab_size - 1 for every n-gram size and skips the
    // primes already taken. Those are always the smallest primes above vocab_size - 1, in
    // order, so the restarted search lands on the prime after the last one taken: searching
    // on from there gives the same primes without re-testing every taken one (the restarts made
    // the search quadratic in the prime count: seconds at a few hundred primes near 2^28).
    int64_t last = vocab_size - 1;
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(n_layers));
    for (auto& layer : out) {
        for (int n = 2; n <= max_ngram; ++n) {
            for (int h = 0; h < n_head; ++h) {
                do {
                    ++last;
                } while (!is_prime(last));
                layer.push_back(last);
            }
        }
    }
    return out;
}

std::vector<int64_t> column_offsets(const std::vector<int64_t>& primes) {
    std::vector<int64_t> out(primes.size(), 0);
    for (size_t c = 1; c < primes.size(); ++c) out[c] = out[c - 1] + primes[c - 1];
    return out;
}

int64_t multiplier_bound(int64_t compressed_vocab) {
    if (compressed_vocab < 1) {
        throw Error("engram: compressed_vocab_size must be positive, got " +
                    std::to_string(compressed_vocab));
    }
    const int64_t b = (std::numeric_limits<int64_t>::max() / compressed_vocab) / 2;
    return b < 1 ? 1 : b;
}

void check_multipliers(const std::vector<int64_t>& multipliers, int max_ngram,
                       int64_t compressed_vocab, const char* what) {
    if (static_cast<int64_t>(multipliers.size()) != max_ngram) {
        throw Error(std::string("engram ") + what + ": expected " + std::to_string(max_ngram) +
                    " hash multipliers (one per look-back), got " +
                    std::to_string(multipliers.size()));
    }
    const int64_t bound = multiplier_bound(compressed_vocab);
    for (size_t s = 0; s < multipliers.size(); ++s) {
        const int64_t m = multipliers[s];
        // 2 v + 1 with v in [0, bound): odd, in [1, 2 bound - 1].
        if (m < 1 || m % 2 == 0 || (m - 1) / 2 >= bound) {
            throw Error(std::string("engram ") + what + ": multiplier " + std::to_string(s) +
                        " = " + std::to_string(m) + " is not of the form 2v+1 with v in [0, " +
                        std::to_string(bound) + ")");
        }
    }
}

std::vector<layer_hash> build_layers(int64_t vocab_size, int n_layers, int max_ngram, int n_head,
                                     int64_t compressed_vocab,
                                     const std::vector<uint64_t>& multipliers,
                                     const std::vector<uint64_t>& expected_rows,
                                     const std::vector<uint64_t>& stored_primes) {
    const auto primes = bucket_primes(vocab_size, n_layers, max_ngram, n_head);
    const size_t n_col = static_cast<size_t>(max_ngram - 1) * static_cast<size_t>(n_head);
    if (multipliers.size() != static_cast<size_t>(n_layers) * static_cast<size_t>(max_ngram)) {
        throw Error("engram: expected " + std::to_string(n_layers) + " x " +
                    std::to_string(max_ngram) + " multipliers, got " +
                    std::to_string(multipliers.size()));
    }
    if (!expected_rows.empty() && expected_rows.size() != static_cast<size_t>(n_layers)) {
        throw Error("engram: expected " + std::to_string(n_layers) + " table row counts, got " +
                    std::to_string(expected_rows.size()));
    }
    if (!stored_primes.empty() && stored_primes.size() != static_cast<size_t>(n_layers) * n_col) {
        throw Error("engram: expected " + std::to_string(static_cast<size_t>(n_layers) * n_col) +
                    " stored primes, got " + std::to_string(stored_primes.size()));
    }
    std::vector<layer_hash> out(static_cast<size_t>(n_layers));
    for (int l = 0; l < n_layers; ++l) {
        const std::string what = "layer " + std::to_string(l);
        auto& L = out[static_cast<size_t>(l)];
        L.primes = primes[static_cast<size_t>(l)];
        L.offsets = column_offsets(L.primes);
        for (int64_t p : L.primes) L.rows += p;
        for (int s = 0; s < max_ngram; ++s) {
            const uint64_t m = multipliers[static_cast<size_t>(l * max_ngram + s)];
            L.multipliers.push_back(m > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                        ? int64_t{-1}
                                        : static_cast<int64_t>(m));
        }
        check_multipliers(L.multipliers, max_ngram, compressed_vocab, what.c_str());
        if (!expected_rows.empty() &&
            expected_rows[static_cast<size_t>(l)] != static_cast<uint64_t>(L.rows)) {
            throw Error("engram " + what + ": num_embeddings is " +
                        std::to_string(expected_rows[static_cast<size_t>(l)]) +
                        " but the recomputed primes sum to " + std::to_string(L.rows));
        }
        for (size_t c = 0; c < n_col && !stored_primes.empty(); ++c) {
            const uint64_t got = stored_primes[static_cast<size_t>(l) * n_col + c];
            if (got != static_cast<uint64_t>(L.primes[c])) {
                throw Error("engram " + what + ": stored prime of column " + std::to_string(c) +
                            " is " + std::to_string(got) + ", recomputed " +
                            std::to_string(L.primes[c]));
            }
        }
    }
    return out;
}

void hash_positions(const std::vector<layer_hash>& layers, int max_ngram, int n_head,
                    int64_t compressed_vocab, int64_t pad_id, const int64_t* hist,
                    int64_t hist_pos0, int64_t hist_len, int64_t p0, int64_t n_pos, int64_t* out) {
    check_shape(max_ngram, n_head);
    const int64_t n_col = static_cast<int64_t>(max_ngram - 1) * n_head;
    if (pad_id < 0 || pad_id >= compressed_vocab) {
        throw Error("engram: pad id " + std::to_string(pad_id) + " outside [0, " +
                    std::to_string(compressed_vocab) + ")");
    }
    for (const auto& L : layers) {
        if (static_cast<int64_t>(L.primes.size()) != n_col ||
            static_cast<int64_t>(L.offsets.size()) != n_col ||
            static_cast<int>(L.multipliers.size()) != max_ngram) {
            throw Error("engram: layer constants do not match max_ngram / head_count");
        }
    }
    if (n_pos < 0 || p0 < 0) throw Error("engram: negative position or count");
    if (n_pos == 0) return;
    const int64_t first_read = std::max<int64_t>(0, p0 - (max_ngram - 1));
    const int64_t last_read = p0 + n_pos - 1;
    if (first_read < hist_pos0 || last_read >= hist_pos0 + hist_len) {
        throw Error("engram: positions " + std::to_string(first_read) + ".." +
                    std::to_string(last_read) + " are needed but the history holds " +
                    std::to_string(hist_pos0) + ".." + std::to_string(hist_pos0 + hist_len - 1));
    }
    for (int64_t i = first_read; i <= last_read; ++i) {
        const int64_t id = hist[i - hist_pos0];
        if (id != kDead && (id < 0 || id >= compressed_vocab)) {
            throw Error("engram: compressed id " + std::to_string(id) + " at position " +
                        std::to_string(i) + " outside [0, " + std::to_string(compressed_vocab) +
                        ")");
        }
    }
    const int64_t n_layers = static_cast<int64_t>(layers.size());
    for (int64_t t = 0; t < n_pos; ++t) {
        const int64_t p = p0 + t;
        for (int64_t l = 0; l < n_layers; ++l) {
            const layer_hash& L = layers[static_cast<size_t>(l)];
            int64_t* o = out + (t * n_layers + l) * n_col;
            bool blocked = false;
            // Non-negative int64 throughout: id * mult < 2^63 by the bound, XOR keeps the sign.
            int64_t rolling = 0;
            for (int s = 0; s < max_ngram; ++s) {
                blocked = blocked || p - s < 0 || hist[p - s - hist_pos0] == kDead;  // sticky
                const int64_t v = blocked ? pad_id : hist[p - s - hist_pos0];
                const int64_t term = v * L.multipliers[static_cast<size_t>(s)];
                rolling = s == 0 ? term : (rolling ^ term);
                if (s == 0) continue;
                for (int h = 0; h < n_head; ++h) {
                    const int64_t c = static_cast<int64_t>(s - 1) * n_head + h;
                    o[c] = rolling % L.primes[static_cast<size_t>(c)] +
                           L.offsets[static_cast<size_t>(c)];
                }
            }
        }
    }
}

int64_t row_bytes(int64_t head_dim) {
    if (head_dim <= 0 || head_dim % 32 != 0) {
        throw Error("engram: head_dim must be a positive multiple of 32, got " +
                    std::to_string(head_dim));
    }
    return head_dim + head_dim / 32;
}

void dequant_row(const uint8_t* row, int64_t head_dim, float* out) {
    row_bytes(head_dim);
    for (int64_t d = 0; d < head_dim; ++d) {
        const float s = quant::ue8m0_to_float(row[head_dim + d / 32]);
        out[d] = quant::round_bf16(quant::e4m3_decode(row[d]) * s);
    }
}

}  // namespace magnetar::engram
