#include "cli/imatrix_collector.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/format.h"

namespace magnetar::cli {

namespace {

// Which tapped intermediate is the input of which weight (suffixes after the layer prefix).
// The routed experts are handled apart (their rows are routed with moe_sel).
struct feed {
    const char* tap;
    const char* weight;
    bool grouped;  // the tap row holds several inputs of the weight's columns (wo_a groups)
};

constexpr feed kFeeds[] = {
    {"attn_norm", "attn_q_a.weight", false},
    {"attn_norm", "attn_kv.weight", false},
    {"attn_norm", "attn_compressor_kv.weight", false},
    {"attn_norm", "attn_compressor_gate.weight", false},
    {"attn_norm", "indexer_compressor_kv.weight", false},
    {"attn_norm", "indexer_compressor_gate.weight", false},
    {"attn_norm", "indexer.proj.weight", false},
    {"q_lora", "attn_q_b.weight", false},
    {"q_lora", "indexer.attn_q_b.weight", false},
    {"attn_o", "attn_output_a.weight", true},
    {"attn_o_lora", "attn_output_b.weight", false},
    {"ffn_norm", "ffn_gate_inp.weight", false},
    {"ffn_norm", "ffn_gate_shexp.weight", false},
    {"ffn_norm", "ffn_up_shexp.weight", false},
    {"shexp_swiglu", "ffn_down_shexp.weight", false},
    {"result_norm", "output.weight", false},  // global (no layer prefix)
};

// Splits a tap name into its layer prefix ("blk.3.", "mtp." or "") and the intermediate.
void split_name(const std::string& name, std::string* prefix, std::string* what) {
    size_t cut = 0;
    if (name.rfind("blk.", 0) == 0) {
        const size_t dot = name.find('.', 4);
        cut = dot == std::string::npos ? 0 : dot + 1;
    } else if (name.rfind("mtp.", 0) == 0) {
        cut = 4;
    }
    *prefix = name.substr(0, cut);
    *what = name.substr(cut);
}

// Weight-name prefix of a tap prefix: the MTP block's tensors are "mtp.0.*".
std::string weight_prefix(const std::string& tap_prefix) {
    return tap_prefix == "mtp." ? std::string("mtp.0.") : tap_prefix;
}

void add_squares(double* acc, const float* x, int64_t n) {
    for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(x[j]) * static_cast<double>(x[j]);
}

}  // namespace

imatrix_collector::imatrix_collector(shape_fn shape_of) : shape_of_(std::move(shape_of)) {}

std::vector<std::string> imatrix_collector::tap_patterns() {
    std::vector<std::string> out;
    for (const char* what : {"attn_norm", "q_lora", "attn_o", "attn_o_lora", "ffn_norm", "moe_sel",
                             "shexp_swiglu", "moe_swiglu"}) {
        out.push_back(std::string("blk.*.") + what);
        out.push_back(std::string("mtp.") + what);
    }
    out.emplace_back("result_norm");
    return out;
}

imatrix_collector::dense_acc& imatrix_collector::dense_of(const std::string& name,
                                                          const std::string& prefix,
                                                          const std::string& what, int64_t width) {
    auto it = dense_.find(name);
    if (it != dense_.end()) {
        if (!it->second.weights.empty() && width % static_cast<int64_t>(it->second.sum2.size()))
            throw Error(strfmt("imatrix: tap %s changed width to %lld", name.c_str(),
                               static_cast<long long>(width)));
        return it->second;
    }
    dense_acc acc;
    int64_t n_per_row = 0;
    const std::string wp = weight_prefix(prefix);
    for (const feed& f : kFeeds) {
        if (what != f.tap) continue;
        const std::string w = wp + f.weight;
        const auto ne = shape_of_(w);
        if (!ne) continue;
        const int64_t cols = (*ne)[0];
        const bool fits = f.grouped ? cols > 0 && width % cols == 0 : cols == width;
        if (!fits || (n_per_row != 0 && cols != n_per_row)) {
            throw Error(strfmt(
                "imatrix: tap %s has rows of %lld values but %s takes inputs of %lld", name.c_str(),
                static_cast<long long>(width), w.c_str(), static_cast<long long>(cols)));
        }
        n_per_row = cols;
        acc.weights.push_back(w);
    }
    acc.sum2.assign(static_cast<size_t>(n_per_row), 0.0);
    return dense_.emplace(name, std::move(acc)).first->second;
}

imatrix_collector::expert_acc* imatrix_collector::experts_of(const std::string& prefix,
                                                             int64_t width) {
    auto it = experts_.find(prefix);
    if (it != experts_.end()) return &it->second;
    const std::string wp = weight_prefix(prefix);
    const auto gate = shape_of_(wp + "ffn_gate_exps.weight");
    if (!gate) return nullptr;
    if (gate->size() != 3 || (*gate)[0] != width) {
        throw Error(
            strfmt("imatrix: %sffn_norm has rows of %lld values but %sffn_gate_exps.weight "
                   "is not [%lld, F, E]",
                   prefix.c_str(), static_cast<long long>(width), wp.c_str(),
                   static_cast<long long>(width)));
    }
    expert_acc ex;
    ex.prefix = wp;
    ex.in = imatrix::entry::zeros(width, (*gate)[2]);
    return &experts_.emplace(prefix, std::move(ex)).first->second;
}

void imatrix_collector::rows(const std::string& name, int64_t first_pos, int64_t n_rows,
                             int64_t width, const float* data) {
    std::string prefix, what;
    split_name(name, &prefix, &what);
    if (what == "moe_sel" || what == "moe_swiglu") {
        auto it = experts_.find(prefix);
        if (it == experts_.end()) return;  // the layer has no routed-expert tensors
        if (what == "moe_sel") {
            route_rows(it->second, name, first_pos, n_rows, width, data);
        } else {
            down_rows(it->second, name, first_pos, n_rows, width, data);
        }
        return;
    }
    if (what == "ffn_norm") {
        if (expert_acc* ex = experts_of(prefix, width)) {
            ex->pending_x.assign(data, data + n_rows * width);
            ex->pending_first = first_pos;
            ex->pending_rows = n_rows;
        }
    }
    dense_acc& acc = dense_of(name, prefix, what, width);
    if (acc.weights.empty()) return;
    const auto cols = static_cast<int64_t>(acc.sum2.size());
    for (int64_t t = 0; t < n_rows; ++t) {
        for (int64_t g = 0; g < width; g += cols)
            add_squares(acc.sum2.data(), data + t * width + g, cols);
    }
    acc.count += n_rows * (width / cols);
}

// moe_sel [n, k]: each token's ffn_norm row is an input row of each of its k experts' gate and
// up matrices.
void imatrix_collector::route_rows(expert_acc& ex, const std::string& name, int64_t first_pos,
                                   int64_t n_rows, int64_t width, const float* data) {
    if (ex.pending_first != first_pos || ex.pending_rows != n_rows) {
        throw Error(strfmt("imatrix: %s for positions %lld.. without the matching ffn_norm rows",
                           name.c_str(), static_cast<long long>(first_pos)));
    }
    const int64_t D = ex.in.n_per_row;
    const int64_t E = ex.in.n_mat;
    ex.k = width;
    ex.pending_sel.resize(static_cast<size_t>(n_rows * width));
    for (int64_t t = 0; t < n_rows; ++t) {
        for (int64_t i = 0; i < width; ++i) {
            const auto e = static_cast<int32_t>(std::lround(data[t * width + i]));
            if (e < 0 || e >= E)
                throw Error(strfmt("imatrix: %s selects expert %d of %lld", name.c_str(), e,
                                   static_cast<long long>(E)));
            ex.pending_sel[static_cast<size_t>(t * width + i)] = e;
            add_squares(ex.in.in_sum2.data() + e * D, ex.pending_x.data() + t * D, D);
            ++ex.in.counts[static_cast<size_t>(e)];
        }
    }
    ex.pending_x.clear();
}

// moe_swiglu [n, k*F]: slot i of token t is an input row of expert sel[t][i]'s down matrix.
void imatrix_collector::down_rows(expert_acc& ex, const std::string& name, int64_t first_pos,
                                  int64_t n_rows, int64_t width, const float* data) {
    if (ex.pending_first != first_pos || ex.pending_rows != n_rows ||
        ex.pending_sel.size() != static_cast<size_t>(n_rows * ex.k) || ex.k == 0) {
        throw Error(strfmt("imatrix: %s for positions %lld.. without the matching moe_sel rows",
                           name.c_str(), static_cast<long long>(first_pos)));
    }
    const int64_t k = ex.k;
    const int64_t E = ex.in.n_mat;
    if (ex.down.n_per_row == 0) {
        const std::string w = ex.prefix + "ffn_down_exps.weight";
        const auto ne = shape_of_(w);
        if (!ne || ne->size() != 3 || (*ne)[0] * k != width || (*ne)[2] != E) {
            throw Error(strfmt(
                "imatrix: %s has rows of %lld values (%lld experts each), which do "
                "not fit %s",
                name.c_str(), static_cast<long long>(width), static_cast<long long>(k), w.c_str()));
        }
        ex.down = imatrix::entry::zeros(width / k, E);
    }
    const int64_t F = ex.down.n_per_row;
    for (int64_t t = 0; t < n_rows; ++t) {
        for (int64_t i = 0; i < k; ++i) {
            const int32_t e = ex.pending_sel[static_cast<size_t>(t * k + i)];
            add_squares(ex.down.in_sum2.data() + e * F, data + t * width + i * F, F);
            ++ex.down.counts[static_cast<size_t>(e)];
        }
    }
    ex.pending_sel.clear();
    ex.pending_first = -1;
}

imatrix::data imatrix_collector::result() const {
    imatrix::data d;
    for (const auto& [name, acc] : dense_) {
        if (acc.weights.empty() || acc.count == 0) continue;
        imatrix::entry e = imatrix::entry::zeros(static_cast<int64_t>(acc.sum2.size()), 1);
        e.in_sum2 = acc.sum2;
        e.counts[0] = acc.count;
        for (const std::string& w : acc.weights) d.entries[w] = e;
    }
    for (const auto& [prefix, ex] : experts_) {
        d.entries[ex.prefix + "ffn_gate_exps.weight"] = ex.in;
        d.entries[ex.prefix + "ffn_up_exps.weight"] = ex.in;
        if (ex.down.n_per_row > 0) d.entries[ex.prefix + "ffn_down_exps.weight"] = ex.down;
    }
    return d;
}

}  // namespace magnetar::cli
