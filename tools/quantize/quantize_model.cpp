#include "quantize/quantize_model.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"
#include "quant/quantize.h"
#include "quantize/imatrix.h"

namespace magnetar::quantize_tool {

namespace {

bool contains(const std::string& s, const char* frag) {
    return s.find(frag) != std::string::npos;
}

// Importance per tensor name: the mean squares of each matrix's input columns,
// [n_mat][n_per_row] (a legacy file's expert entries are one flat [n_per_row * n_mat] vector).
using importance_map = std::map<std::string, std::vector<float>>;

importance_map load_importance(const std::string& path) {
    const imatrix::data d = imatrix::read(path);
    importance_map out;
    for (const auto& [name, e] : d.entries) out.emplace(name, imatrix::mean_squares(e));
    return out;
}

// ---------------------------------------------------------------------------------------------
// Planning
// ---------------------------------------------------------------------------------------------

struct rule {
    std::string pattern;
    bool keep_input;  // no type given
    ggml_type type;
};

rule parse_rule(const std::string& s) {
    const size_t eq = s.rfind('=');
    if (eq == std::string::npos) return {s, true, ggml_type::F32};
    const std::string pat = s.substr(0, eq);
    const std::string tn = s.substr(eq + 1);
    const auto t = type_from_name(tn);
    if (pat.empty() || !t || !can_quantize_to(*t)) {
        std::string names;
        for (const type_traits& tt : all_type_traits()) {
            if (!can_quantize_to(tt.type)) continue;
            names += names.empty() ? "" : ", ";
            names += tt.name;
        }
        throw Error(strfmt("--keep '%s': expected PATTERN or PATTERN=TYPE with TYPE one of %s",
                           s.c_str(), names.c_str()));
    }
    return {pat, false, *t};
}

// The scheme's type for a tensor class, or nullopt for "unchanged".
std::optional<ggml_type> scheme_type(const std::string& scheme, const tensor_spec& spec) {
    if (spec.role == tensor_role::routed_expert) {
        if (scheme == "q2")
            return contains(spec.name, "ffn_down_exps") ? ggml_type::Q2_K : ggml_type::IQ2_XXS;
        if (scheme == "q4") return ggml_type::Q4_K;
        if (scheme == "q8") return ggml_type::Q8_0;
        return std::nullopt;
    }
    if (scheme == "q8" && spec.dtype == dtype_class::matrix) return ggml_type::Q8_0;
    return std::nullopt;
}

struct file_plan {
    std::unique_ptr<gguf::reader> in;
    std::vector<plan_entry> entries;  // file order
};

file_plan plan_file(const options& o) {
    if (o.scheme != "q2" && o.scheme != "q4" && o.scheme != "q8" && o.scheme != "custom") {
        throw Error("--scheme must be q2, q4, q8 or custom (got '" + o.scheme + "')");
    }
    std::vector<rule> rules;
    for (const auto& k : o.keep) rules.push_back(parse_rule(k));

    file_plan fp;
    fp.in = gguf::reader::open(o.input);
    const gguf::reader& in = *fp.in;
    const hparams hp = read_hparams(in);
    bool with_mtp = false;
    for (const auto& t : in.tensors()) with_mtp = with_mtp || t.name.rfind("mtp.", 0) == 0;
    std::map<std::string, tensor_spec> specs;
    for (auto& s : tensor_catalogue(hp, with_mtp)) specs.emplace(s.name, s);
    if (!with_mtp) {
        for (auto& s : mtp_catalogue(hp)) specs.emplace(s.name, s);
    }

    for (const auto& t : in.tensors()) {
        plan_entry e{t.name, t.type, t.type, "unchanged"};
        const auto it = specs.find(t.name);
        const tensor_spec* spec = it == specs.end() ? nullptr : &it->second;
        if (spec) {
            if (const auto st = scheme_type(o.scheme, *spec)) {
                if (t.ne[0] % type_traits_of(*st).block_elems == 0 && *st != t.type) {
                    e.to = *st;
                    e.why = "scheme " + o.scheme;
                }
            }
        }
        for (const rule& r : rules) {
            if (fnmatch(r.pattern.c_str(), t.name.c_str(), 0) != 0) continue;
            e.to = r.keep_input ? t.type : r.type;
            e.why = "--keep " + r.pattern;
        }
        if (e.to != e.from) {
            if (!spec)
                throw Error(
                    strfmt("%s: not a DeepSeek V4 tensor; only known tensors can change type",
                           t.name.c_str()));
            if (!dtype_class_accepts(spec->dtype, e.to)) {
                throw Error(strfmt("%s: %s (%s) cannot hold %s", t.name.c_str(),
                                   dtype_class_name(spec->dtype), e.why.c_str(),
                                   type_traits_of(e.to).name));
            }
            if (t.ne[0] % type_traits_of(e.to).block_elems != 0) {
                throw Error(strfmt("%s: rows of %lld values are not whole %s blocks (%u)",
                                   t.name.c_str(), static_cast<long long>(t.ne[0]),
                                   type_traits_of(e.to).name, type_traits_of(e.to).block_elems));
            }
            if (!to_float_of(e.from)) {
                throw Error(strfmt("%s: cannot convert from %s", t.name.c_str(),
                                   type_traits_of(e.from).name));
            }
        }
        fp.entries.push_back(e);
    }
    // Gate and up experts of a layer must share one type.
    std::map<std::string, ggml_type> gate;
    for (const auto& e : fp.entries) {
        if (contains(e.name, "ffn_gate_exps"))
            gate[e.name.substr(0, e.name.find("ffn_gate_exps"))] = e.to;
    }
    for (const auto& e : fp.entries) {
        if (!contains(e.name, "ffn_up_exps")) continue;
        const auto g = gate.find(e.name.substr(0, e.name.find("ffn_up_exps")));
        if (g != gate.end() && g->second != e.to) {
            throw Error(
                strfmt("%s is %s but the layer's gate experts are %s; gate and up experts must "
                       "share one type",
                       e.name.c_str(), type_traits_of(e.to).name, type_traits_of(g->second).name));
        }
    }
    return fp;
}

// ---------------------------------------------------------------------------------------------
// Streaming rewrite
// ---------------------------------------------------------------------------------------------

// Importance rows for each matrix of a tensor (null entries: none). Warns about entries of the
// wrong size.
std::vector<const float*> importance(const importance_map& im, const plan_entry& e,
                                     int64_t n_per_row, int64_t n_mat, bool quiet) {
    std::vector<const float*> out(static_cast<size_t>(n_mat), nullptr);
    const auto it = im.find(e.name);
    if (it == im.end()) return out;
    const auto& v = it->second;
    const auto n = static_cast<int64_t>(v.size());
    for (int64_t m = 0; m < n_mat; ++m) {
        if (n == n_per_row * n_mat) {
            out[static_cast<size_t>(m)] = v.data() + m * n_per_row;
        } else if (n == n_per_row) {
            out[static_cast<size_t>(m)] = v.data();
        }
    }
    if (n != n_per_row && n != n_per_row * n_mat && !quiet) {
        std::fprintf(
            stderr,
            "quantize: warning: imatrix entry %s has %lld values, expected %lld or %lld; ignored\n",
            e.name.c_str(), static_cast<long long>(n), static_cast<long long>(n_per_row),
            static_cast<long long>(n_per_row * n_mat));
    }
    return out;
}

void convert_tensor(const gguf::reader& in, const gguf::tensor_info& t, const plan_entry& e,
                    const importance_map& im, thread_pool& pool, gguf::writer& w,
                    Progress& progress, bool quiet) {
    const uint8_t* src = in.tensor_data(t);
    if (e.to == e.from) {
        constexpr uint64_t kChunk = 64ull << 20;
        for (uint64_t off = 0; off < t.n_bytes; off += kChunk) {
            const uint64_t n = std::min(kChunk, t.n_bytes - off);
            w.write_tensor_data(src + off, static_cast<size_t>(n));
            progress.add(n);
        }
        return;
    }
    const int64_t n_per_row = t.ne[0];
    const int64_t n_rows = t.n_elements() / n_per_row;
    const int64_t rows_per_mat = t.ne[1];
    const int64_t n_mat = n_rows / rows_per_mat;
    const size_t in_rb = row_bytes(e.from, n_per_row);
    const size_t out_rb = row_bytes(e.to, n_per_row);
    const to_float_fn to_float = to_float_of(e.from);
    const std::vector<const float*> qw =
        quantize_uses_imatrix(e.to)
            ? importance(im, e, n_per_row, n_mat, quiet)
            : std::vector<const float*>(static_cast<size_t>(n_mat), nullptr);
    // Chunks of about 8 MiB of output, rows cut per thread.
    const int64_t rows_per_chunk =
        std::max<int64_t>(pool.size(), static_cast<int64_t>((8u << 20) / out_rb));
    std::vector<uint8_t> out(static_cast<size_t>(rows_per_chunk) * out_rb);
    for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
        const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
        pool.parallel_for(nr, [&](int64_t a, int64_t b, int) {
            std::vector<float> row(static_cast<size_t>(n_per_row));
            for (int64_t i = a; i < b; ++i) {
                const int64_t r = r0 + i;
                to_float(src + static_cast<size_t>(r) * in_rb, row.data(), n_per_row);
                quantize_rows(e.to, row.data(), out.data() + static_cast<size_t>(i) * out_rb, 1,
                              n_per_row, qw[static_cast<size_t>(r / rows_per_mat)]);
            }
        });
        w.write_tensor_data(out.data(), static_cast<size_t>(nr) * out_rb);
        progress.add(static_cast<uint64_t>(nr) * out_rb);
    }
}

}  // namespace

std::vector<plan_entry> make_plan(const options& o) {
    return plan_file(o).entries;
}

void run(const options& o) {
    if (o.output.empty() && !o.dry_run) throw Error("quantize: no output path");
    file_plan fp = plan_file(o);
    const gguf::reader& in = *fp.in;
    importance_map im;
    if (!o.imatrix.empty()) im = load_importance(o.imatrix);
    // Entries that name no tensor of the model usually mean a collector / model mismatch.
    size_t unmatched = 0;
    std::string first_unmatched;
    for (const auto& [name, v] : im) {
        if (in.find_tensor(name)) continue;
        if (unmatched++ == 0) first_unmatched = name;
    }
    if (unmatched && !o.quiet) {
        std::fprintf(stderr,
                     "quantize: warning: %zu of %zu imatrix entries name no tensor of %s (first: "
                     "%s)\n",
                     unmatched, im.size(), o.input.c_str(), first_unmatched.c_str());
    }

    uint64_t in_bytes = 0, out_bytes = 0;
    size_t changed = 0;
    bool any_quant = false;
    for (size_t i = 0; i < fp.entries.size(); ++i) {
        const auto& t = in.tensors()[i];
        const auto& e = fp.entries[i];
        in_bytes += t.n_bytes;
        out_bytes += *type_bytes(e.to, static_cast<uint64_t>(t.n_elements()));
        changed += e.to != e.from;
        any_quant = any_quant || type_traits_of(e.to).is_quantized;
    }
    if (!o.quiet || o.dry_run) {
        std::fprintf(
            stderr, "quantize: %s -> %s, scheme %s: %zu of %zu tensors change type, %s -> %s%s\n",
            o.input.c_str(), o.output.c_str(), o.scheme.c_str(), changed, fp.entries.size(),
            human_bytes(in_bytes).c_str(), human_bytes(out_bytes).c_str(),
            o.imatrix.empty()
                ? ""
                : strfmt(", importance from %s (%zu entries)", o.imatrix.c_str(), im.size())
                      .c_str());
    }
    size_t iq2_uniform = 0;
    for (const auto& e : fp.entries)
        iq2_uniform += e.to == ggml_type::IQ2_XXS && e.from != e.to && !im.count(e.name);
    if (iq2_uniform && !o.quiet) {
        std::fprintf(stderr,
                     "quantize: warning: %zu tensors become IQ2_XXS without importance data "
                     "(uniform importance; "
                     "GGML requires an imatrix for this type)\n",
                     iq2_uniform);
    }
    if (o.dry_run) {
        for (const auto& e : fp.entries) {
            std::printf("%-48s %-8s -> %-8s %s\n", e.name.c_str(), type_traits_of(e.from).name,
                        type_traits_of(e.to).name, e.why.c_str());
        }
        return;
    }

    gguf::writer w(o.output, in.alignment());
    for (const auto& k : in.metadata()) {
        if (k.key == "general.alignment") continue;
        w.set(k.key, k.val);
    }
    if (any_quant) w.set("general.quantization_version", gguf::value::make_u32(2));
    std::string cmd = "magnetar quantize --scheme " + o.scheme;
    if (!o.imatrix.empty()) cmd += " --imatrix " + o.imatrix;
    for (const auto& k : o.keep) cmd += " --keep " + k;
    w.set("general.quantized_by", gguf::value::make_string(cmd));
    for (size_t i = 0; i < fp.entries.size(); ++i) {
        const auto& t = in.tensors()[i];
        w.add_tensor(t.name, fp.entries[i].to, std::span<const int64_t>(t.ne, t.n_dims));
    }
    const int n_threads = o.n_threads > 0
                              ? o.n_threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    thread_pool pool(n_threads);
    Progress progress("quantize " + o.scheme, out_bytes, Progress::Unit::bytes, o.quiet);
    for (size_t i = 0; i < fp.entries.size(); ++i) {
        convert_tensor(in, in.tensors()[i], fp.entries[i], im, pool, w, progress, o.quiet);
    }
    w.finish();
    progress.finish();
}

}  // namespace magnetar::quantize_tool
