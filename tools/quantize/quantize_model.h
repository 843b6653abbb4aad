// `magnetar quantize`: requantizes a DeepSeek V4 GGUF per tensor class, streaming.
//
// Owns: the scheme tables (which tensor classes get which type), --keep rules, matching
// importance data to tensors and the streaming rewrite: one tensor at a time, rows dequantized
// and requantized on a thread pool, written in order with a progress bar. Does not own: the
// quantization algorithms (quant/quantize.h), importance-matrix files (quantize/imatrix.h) or
// the container format (gguf/gguf.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quant/types.h"

namespace magnetar::quantize_tool {

struct options {
    std::string input;
    std::string output;
    // q2: routed experts gate/up IQ2_XXS, down Q2_K; q4: routed experts Q4_K; q8: routed
    // experts and every other matrix-class tensor Q8_0; custom: only the --keep rules.
    // Everything a scheme does not name keeps its type.
    std::string scheme = "q2";
    std::string imatrix;            // optional importance matrix file (GGUF imatrix or legacy)
    std::vector<std::string> keep;  // "PATTERN" (keep the input type) or "PATTERN=TYPE"
    int n_threads = 0;              // 0: all cores
    bool quiet = false;
    bool dry_run = false;  // print the plan, write nothing
};

// One tensor's decision.
struct plan_entry {
    std::string name;
    ggml_type from;
    ggml_type to;
    std::string why;  // "scheme q2", "--keep blk.*", "unchanged"
};

// Decides every tensor's output type (validating rules against the catalogue) without writing.
std::vector<plan_entry> make_plan(const options& o);

// Runs the whole rewrite. Throws magnetar::Error on any problem (the output is then not
// created: the writer removes its temporary file).
void run(const options& o);

}  // namespace magnetar::quantize_tool
