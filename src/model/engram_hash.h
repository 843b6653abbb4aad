// Engram n-gram hashing and table-row decoding for DeepSeek V4.1 (spec v41 §3.9.2 - §3.9.4).
//
// Owns: the bucket primes and per-layer offsets recomputed from the configuration, the bound
// and a validity check for the stored hash multipliers, the row indices of a range of
// positions (sticky blocking, one rolling value per n-gram size shared by the heads), and the
// dequantization of one row264-style table row. Plain parameters only, so the model loader
// (validation) and the forward pass (lookups) both use it.
// Does not own: the token map (built offline, read from the GGUF), the table storage, the
// key / value projection and the gate (the graph).
#pragma once

#include <cstdint>
#include <vector>

namespace magnetar::engram {

// Compressed-id history mark for a position that must not be hashed (an image-span token):
// it blocks its own and every longer look-back.
inline constexpr int64_t kDead = -1;

// The hashing constants of one Engram layer. Columns are flat in (n - 2, head) order:
// c = (n - 2) * n_head + h for n-gram sizes n = 2 .. max_ngram.
struct layer_hash {
    std::vector<int64_t> primes;       // [C] bucket count of each column
    std::vector<int64_t> offsets;      // [C] first row of each column in the layer's table
    std::vector<int64_t> multipliers;  // [max_ngram] odd, one per look-back s
    int64_t rows = 0;                  // table rows: the sum of the primes
};

// The primes of every Engram layer (§3.9.2): for each layer in order and each n-gram size the
// search restarts at vocab_size - 1 and takes the n_head smallest primes above it that no
// earlier column took. Result [n_layers][C]. Throws Error on a bad configuration.
std::vector<std::vector<int64_t>> bucket_primes(int64_t vocab_size, int n_layers, int max_ngram,
                                                int n_head);

// Prefix sums of one layer's primes: offsets[c] = sum of primes[c'] for c' < c.
std::vector<int64_t> column_offsets(const std::vector<int64_t>& primes);

// The multiplier bound of §3.9.3: floor(floor((2^63 - 1) / compressed_vocab) / 2), at least 1.
int64_t multiplier_bound(int64_t compressed_vocab);

// Throws Error unless there are max_ngram multipliers, each odd and in [1, 2 * bound - 1], so
// that id * multiplier < 2^63 for every compressed id. `what` names the layer in the message.
void check_multipliers(const std::vector<int64_t>& multipliers, int max_ngram,
                       int64_t compressed_vocab, const char* what);

// Builds the constants of every layer from the configuration and the stored multipliers
// (flat [n_layers][max_ngram], the GGUF layout), checking the multipliers. When
// expected_rows is non-empty (the GGUF's num_embeddings), each layer's prime sum must equal it;
// when stored_primes is non-empty (flat [n_layers][C]), it must equal the recomputed primes.
std::vector<layer_hash> build_layers(int64_t vocab_size, int n_layers, int max_ngram, int n_head,
                                     int64_t compressed_vocab,
                                     const std::vector<uint64_t>& multipliers,
                                     const std::vector<uint64_t>& expected_rows,
                                     const std::vector<uint64_t>& stored_primes);

// Row indices for positions p0 .. p0 + n_pos - 1 (§3.9.4) into out[n_pos][n_layers][C], C =
// (max_ngram - 1) * n_head (int64). hist holds the compressed id of positions hist_pos0 ..
// hist_pos0 + hist_len - 1 (kDead for blocked tokens); a look-back to a position < 0 is
// blocked, and every position read (p0 - max_ngram + 1 .. p0 + n_pos - 1, those >= 0) must
// lie inside the history. pad_id: the compressed id used for blocked look-backs. Ids must be
// in [0, compressed_vocab). Throws Error on a position outside the history or an id out of
// range.
void hash_positions(const std::vector<layer_hash>& layers, int max_ngram, int n_head,
                    int64_t compressed_vocab, int64_t pad_id, const int64_t* hist,
                    int64_t hist_pos0, int64_t hist_len, int64_t p0, int64_t n_pos, int64_t* out);

// Bytes of one table row: head_dim E4M3 codes then head_dim / 32 UE8M0 scales (264 for 256).
int64_t row_bytes(int64_t head_dim);

// Decodes one row: out[d] = bf16(e4m3(row[d]) * 2^(row[head_dim + d/32] - 127)), which is exact.
void dequant_row(const uint8_t* row, int64_t head_dim, float* out);

}  // namespace magnetar::engram
