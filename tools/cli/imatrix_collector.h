// Collects importance statistics from the forward pass's named intermediates for
// `magnetar imatrix` (docs/imatrix.md).
//
// Owns: which tap feeds which weight (the table in docs/imatrix.md), the per-column sums of
// squares with their row counts, and the routing of token rows to experts with `moe_sel`.
// Does not own: running the model (the command drives a Session and hands every tapped chunk
// to rows()) or the file format (quantize/imatrix.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quantize/imatrix.h"

namespace magnetar::cli {

class imatrix_collector {
  public:
    // Shape (ne, GGUF order) of a model tensor by name, or nullopt when the model has none.
    using shape_fn = std::function<std::optional<std::vector<int64_t>>(const std::string&)>;

    explicit imatrix_collector(shape_fn shape_of);

    // Tap names (with '*' wildcards) to give Session::set_dump.
    static std::vector<std::string> tap_patterns();

    // The dump callback: rows [n_rows, width] of tap `name`. Throws magnetar::Error when the
    // tapped widths do not match the model's tensors.
    void rows(const std::string& name, int64_t first_pos, int64_t n_rows, int64_t width,
              const float* data);

    // Everything collected so far, one entry per weight (weights never fed stay out).
    imatrix::data result() const;

  private:
    // Sums of squares of one tap's rows, folded into n_per_row columns (attn_o feeds the
    // grouped wo_a: each row holds n_o_group inputs of its n_per_row columns).
    struct dense_acc {
        std::vector<double> sum2;          // [n_per_row]
        int64_t count = 0;                 // input rows (tap rows times groups)
        std::vector<std::string> weights;  // the weights this tap feeds
    };
    // One layer's routed experts: inputs of gate / up and of down, per expert.
    struct expert_acc {
        std::string prefix;                // weight-name prefix ("blk.3.", "mtp.0.")
        imatrix::entry in;                 // [E][D]
        imatrix::entry down;               // [E][F] (empty until moe_swiglu arrives)
        std::vector<float> pending_x;      // ffn_norm rows waiting for moe_sel [n][D]
        std::vector<int32_t> pending_sel;  // moe_sel rows waiting for moe_swiglu [n][k]
        int64_t pending_first = -1, pending_rows = 0, k = 0;
    };

    dense_acc& dense_of(const std::string& name, const std::string& prefix, const std::string& what,
                        int64_t width);
    expert_acc* experts_of(const std::string& prefix, int64_t width);
    void route_rows(expert_acc& ex, const std::string& name, int64_t first_pos, int64_t n_rows,
                    int64_t width, const float* data);
    void down_rows(expert_acc& ex, const std::string& name, int64_t first_pos, int64_t n_rows,
                   int64_t width, const float* data);

    shape_fn shape_of_;
    std::map<std::string, dense_acc> dense_;     // by tap name
    std::map<std::string, expert_acc> experts_;  // by tap prefix
};

}  // namespace magnetar::cli
