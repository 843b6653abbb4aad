// `magnetar inspect`: metadata, tensor table, parameter count, size breakdown and memory
// estimate of a DeepSeek V4 or V4.1 GGUF.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/format.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stats.h"

namespace magnetar::cli {

namespace {

// One-line rendering of a metadata value; long arrays show their first entries only.
std::string render_value(const gguf::value& v, size_t max_items = 8) {
    using gguf::value_type;
    switch (v.type) {
        case value_type::u8:
        case value_type::u16:
        case value_type::u32:
        case value_type::u64:
            return std::to_string(v.u);
        case value_type::i8:
        case value_type::i16:
        case value_type::i32:
        case value_type::i64:
            return std::to_string(v.i);
        case value_type::f32:
        case value_type::f64:
            return strfmt("%g", v.f);
        case value_type::boolean:
            return v.u ? "true" : "false";
        case value_type::string:
            return nlohmann::json(v.s).dump(-1, ' ', false,
                                            nlohmann::json::error_handler_t::replace);
        case value_type::array: {
            std::string s =
                strfmt("[%s x %zu] [", gguf::value_type_name(v.elem_type), v.arr.size());
            for (size_t i = 0; i < v.arr.size() && i < max_items; ++i) {
                s += (i ? ", " : "") + render_value(v.arr[i], max_items);
            }
            if (v.arr.size() > max_items) s += ", ...";
            return s + "]";
        }
    }
    return "?";
}

int run_inspect(const std::string& path_flag, const std::string& mtp_path, uint64_t ctx,
                uint32_t kv_bytes, bool summary, bool json) {
    const std::string path = resolve_model_path(path_flag);
    load_options lo;
    lo.mtp_path = mtp_path;
    auto m = model::load(path, lo);
    const hparams& hp = m->hp();
    const gguf::reader& f = m->file();
    const size_stats st = compute_size_stats(*m);
    const bool with_mtp = m->has_draft();
    const kv_memory kv = estimate_kv_memory(hp, ctx, kv_bytes, with_mtp);

    if (json) {
        nlohmann::json j;
        j["file"] = path;
        j["gguf_version"] = f.version();
        j["file_bytes"] = f.file_size();
        j["n_tensors"] = f.tensors().size();
        j["n_layer"] = hp.n_layer;
        j["n_params"] = st.total_params;
        j["tensor_bytes"] = st.total_bytes;
        j["routed_expert_bytes"] = st.routed_expert_bytes();
        j["embedding_bytes"] = st.embedding_bytes();
        j["dense_bytes"] = st.dense_bytes();
        j["global_bytes"] = st.global_bytes;
        j["mtp_bytes"] = st.mtp_bytes;
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            nlohmann::json l = {{"layer", il},
                                {"compress_ratio", hp.compress_ratio(il)},
                                {"hash_routed", hp.is_hash_layer(il)},
                                {"bytes", st.bytes_by_layer[il]}};
            if (hp.is_v41()) {
                l["mode"] = layer_mode_name(hp.mode(il));
                l["kv_source"] = hp.kv_source(il);
                l["index_source"] = hp.index_source(il);
                l["engram"] = hp.engram_index(il) >= 0;
            }
            j["layers"].push_back(l);
        }
        if (hp.is_v41()) {
            j["arch"] = hp.arch;
            j["dspark_stages"] = hp.n_dspark();
            j["kv_bytes_per_token"] = kv_bytes_per_token(hp, kv_bytes);
        }
        for (const auto& [role, bytes] : st.bytes_by_role)
            j["bytes_by_role"][tensor_role_name(role)] = bytes;
        if (!summary) {
            for (const auto& t : f.tensors()) {
                std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
                j["tensors"].push_back({{"name", t.name},
                                        {"type", type_name(static_cast<uint32_t>(t.type))},
                                        {"shape", ne},
                                        {"bytes", t.n_bytes}});
            }
        }
        j["memory"] = {{"ctx", ctx},
                       {"kv_elem_bytes", kv_bytes},
                       {"weights", st.total_bytes},
                       {"kv_growing", kv.growing_bytes},
                       {"kv_raw_windows", kv.raw_window_bytes},
                       {"kv_frontiers", kv.frontier_bytes},
                       {"total", st.total_bytes + kv.total()}};
        std::printf("%s\n",
                    j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }

    std::printf("file: %s\n", path.c_str());
    std::printf("  GGUF v%u, %s, alignment %u, %zu tensors, %zu metadata keys\n", f.version(),
                human_bytes(f.file_size()).c_str(), f.alignment(), f.tensors().size(),
                f.metadata().size());
    std::printf("\n== metadata\n");
    for (const auto& kv_entry : f.metadata()) {
        std::printf("  %-50s = %s\n", kv_entry.key.c_str(), render_value(kv_entry.val).c_str());
    }
    std::printf("\n== model\n");
    if (hp.is_v41()) {
        std::printf(
            "  %s: %u layers (swa %u, full %u, reindex %u, reuse %u; Engram at %u layers)%s\n",
            hp.name.empty() ? kArchDeepseek41 : hp.name.c_str(), hp.n_layer,
            hp.count_mode(layer_mode::swa_only), hp.count_mode(layer_mode::full),
            hp.count_mode(layer_mode::reindex), hp.count_mode(layer_mode::reuse),
            hp.v41.engram.n_layers(),
            with_mtp ? strfmt(" + %u DSpark stages", hp.n_dspark()).c_str() : "");
    } else {
        std::printf(
            "  %s: %u layers (ratio 0: %u, ratio 4: %u, ratio 128: %u; hash-routed: %u)%s\n",
            hp.name.empty() ? "deepseek4" : hp.name.c_str(), hp.n_layer,
            hp.count_layers_with_ratio(0), hp.count_layers_with_ratio(4),
            hp.count_layers_with_ratio(128), hp.n_hash_layer, with_mtp ? " + MTP block" : "");
    }
    std::printf("  D %u, heads %u x %u (rope %u), q_lora %u, output %u groups x %u, vocab %u\n",
                hp.n_embd, hp.n_head, hp.n_head_dim, hp.n_rot, hp.n_q_lora, hp.n_o_group,
                hp.n_o_lora, hp.n_vocab);
    std::printf(
        "  experts %u (%u used, F %u, %u shared), window %u, indexer %u x %u top-%u, HC %u\n",
        hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_expert_shared, hp.n_swa, hp.n_indexer_head,
        hp.n_indexer_head_dim, hp.n_indexer_top_k, hp.n_hc);
    std::printf("  parameters: %s (%llu)\n", human_count(st.total_params).c_str(),
                static_cast<unsigned long long>(st.total_params));

    if (!summary) {
        std::printf("\n== tensors\n  %-44s %-8s %-22s %14s\n", "name", "type", "shape", "bytes");
        for (const auto& t : f.tensors()) {
            std::printf("  %-44s %-8s %-22s %14llu\n", t.name.c_str(),
                        std::string(type_name(static_cast<uint32_t>(t.type))).c_str(),
                        t.shape_str().c_str(), static_cast<unsigned long long>(t.n_bytes));
        }
    }
    if (!m->unknown_tensors().empty()) {
        std::printf("\n== tensors not used by the engine (%zu)\n", m->unknown_tensors().size());
        for (const auto& n : m->unknown_tensors()) std::printf("  %s\n", n.c_str());
    }

    auto pct = [&](uint64_t b) {
        return st.total_bytes ? 100.0 * static_cast<double>(b) / static_cast<double>(st.total_bytes)
                              : 0.0;
    };
    std::printf("\n== size by class\n");
    std::printf("  %-24s %12s  %5.1f%%\n", "routed experts",
                human_bytes(st.routed_expert_bytes()).c_str(), pct(st.routed_expert_bytes()));
    std::printf("  %-24s %12s  %5.1f%%\n", "dense", human_bytes(st.dense_bytes()).c_str(),
                pct(st.dense_bytes()));
    std::printf("  %-24s %12s  %5.1f%%\n", "embeddings + head",
                human_bytes(st.embedding_bytes()).c_str(), pct(st.embedding_bytes()));
    std::printf("  by role:\n");
    for (const auto& [role, bytes] : st.bytes_by_role) {
        std::printf("    %-22s %12s  %5.1f%%  %s params\n", tensor_role_name(role),
                    human_bytes(bytes).c_str(), pct(bytes),
                    human_count(st.params_by_role.at(role)).c_str());
    }
    std::printf("\n== size by layer\n");
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const std::string kind = hp.is_v41()
                                     ? strfmt(" %-7s%s", layer_mode_name(hp.mode(il)),
                                              hp.engram_index(il) >= 0 ? " engram" : "       ")
                                     : std::string(hp.is_hash_layer(il) ? " hash" : "     ");
        std::printf("  layer %3u  ratio %3u%s  %14llu bytes  %s\n", il, hp.compress_ratio(il),
                    kind.c_str(), static_cast<unsigned long long>(st.bytes_by_layer[il]),
                    human_bytes(st.bytes_by_layer[il]).c_str());
    }
    if (with_mtp) {
        std::printf("  %-22s %14llu bytes  %s\n", hp.is_v41() ? "dspark stages" : "mtp block",
                    static_cast<unsigned long long>(st.mtp_bytes),
                    human_bytes(st.mtp_bytes).c_str());
    }
    std::printf("  globals                %14llu bytes  %s\n",
                static_cast<unsigned long long>(st.global_bytes),
                human_bytes(st.global_bytes).c_str());

    if (hp.is_v41()) {
        std::printf("\n== memory estimate at ctx %llu (packed V4.1 cache rows)\n",
                    static_cast<unsigned long long>(ctx));
    } else {
        std::printf("\n== memory estimate at ctx %llu (cache elements of %u bytes)\n",
                    static_cast<unsigned long long>(ctx), kv_bytes);
    }
    std::printf("  weights                %s\n", human_bytes(st.total_bytes).c_str());
    std::printf("  compressed KV (growing) %s (%.0f bytes/token)\n",
                human_bytes(kv.growing_bytes).c_str(), kv_bytes_per_token(hp, kv_bytes));
    std::printf("  raw windows            %s\n", human_bytes(kv.raw_window_bytes).c_str());
    std::printf("  compressor frontiers   %s\n", human_bytes(kv.frontier_bytes).c_str());
    std::printf("  total                  %s\n", human_bytes(st.total_bytes + kv.total()).c_str());
    return 0;
}

action setup(CLI::App& sub) {
    struct args {
        std::string path;
        std::string model;
        std::string mtp;
        uint64_t ctx = 32768;
        uint32_t kv_bytes = 4;
        bool summary = false;
        bool json = false;
    };
    auto a = std::make_shared<args>();
    sub.add_option("file", a->path,
                   "GGUF file (default: -m, $MAGNETAR_MODEL or the embedded default model)");
    sub.add_option("-m,--model", a->model, "GGUF file (same as the positional argument)");
    sub.add_option("--mtp", a->mtp, "Separate MTP GGUF to bind with the model");
    sub.add_option("--ctx", a->ctx, "Context size for the memory estimate")->capture_default_str();
    sub.add_option("--kv-bytes", a->kv_bytes,
                   "Bytes per cache element: 4 (FP32) or 2 (F16/BF16); V4.1 files use packed rows")
        ->check(CLI::IsMember({2, 4}))
        ->capture_default_str();
    sub.add_flag("--summary", a->summary, "Skip the per-tensor table");
    sub.add_flag("--json", a->json, "Machine-readable output");
    return [a]() {
        return run_inspect(a->path.empty() ? a->model : a->path, a->mtp, a->ctx, a->kv_bytes,
                           a->summary, a->json);
    };
}

}  // namespace

MAGNETAR_COMMAND(inspect, "inspect", "Show a model file: metadata, tensors, sizes, memory estimate",
                 setup);

}  // namespace magnetar::cli
