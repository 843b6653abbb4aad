// Importance-matrix files: reading, writing and merging (docs/imatrix.md).
//
// Owns: the in-memory form of an importance matrix (per weight name, the sum of squared input
// activations of every input column and the number of input rows, per matrix; expert tensors
// hold one matrix per expert), the GGUF imatrix format of current llama.cpp (`llama-imatrix`,
// `NAME.in_sum2` / `NAME.counts` tensors with `imatrix.*` metadata), GGML's legacy `.dat`
// format (read only), exact merging, and the per-column mean squares the quantizer weights
// with. Does not own: collecting activations (tools/cli/imatrix_collector.h) or quantizing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace magnetar::imatrix {

// Statistics of one weight (name as in the model, e.g. "blk.3.ffn_down_exps.weight").
struct entry {
    int64_t n_per_row = 0;        // input columns (the weight's ne[0])
    int64_t n_mat = 1;            // matrices: 1, or n_expert for routed-expert tensors
    std::vector<double> in_sum2;  // [n_mat][n_per_row] sum over input rows of x^2
    std::vector<int64_t> counts;  // [n_mat] input rows accumulated

    static entry zeros(int64_t n_per_row, int64_t n_mat);
};

struct data {
    std::map<std::string, entry> entries;  // sorted by name (the file order)
    std::vector<std::string> datasets;     // imatrix.datasets: the prompt files used
    uint32_t chunk_count = 0;              // imatrix.chunk_count: chunks evaluated
    uint32_t chunk_size = 0;               // imatrix.chunk_size: tokens per chunk
};

// Chunk size assumed for legacy files, which store means times chunk counts (as llama.cpp).
constexpr uint32_t kLegacyChunkSize = 512;

// Reads a GGUF imatrix or a legacy .dat file (told apart by the GGUF magic). A legacy entry
// becomes n_mat 1 with counts ncall * chunk_size. Throws magnetar::Error naming the file.
data read(const std::string& path, uint32_t legacy_chunk_size = kLegacyChunkSize);

// Writes the GGUF imatrix format: general.type "imatrix", imatrix.datasets / chunk_count /
// chunk_size, then per entry NAME.in_sum2 [n_per_row, n_mat] and NAME.counts [1, n_mat], F32,
// in name order. Counts above 2^24 are not exact in F32: *warning receives a note then.
void write(const data& d, const std::string& path, std::string* warning = nullptr);

// Adds `from` into `into`: sums and counts add per entry (exact for the counts, which are
// integers), new entries are copied, datasets appended, chunk counts added. An entry whose
// shape differs throws, except a legacy entry (n_mat 1) against an expert entry of the same
// total size, whose counts are broadcast over the experts.
void merge(data& into, const data& from);

// Mean square per column, [n_mat][n_per_row]: in_sum2 / count; matrices never seen (count 0)
// get 1 (uniform importance), as llama.cpp does.
std::vector<float> mean_squares(const entry& e);

}  // namespace magnetar::imatrix
