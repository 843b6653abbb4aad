// The V4.1 half of the model generator: random weights drawn in the official checkpoint formats
// (spec v41.md §4.1, §6.1) and written in a storage profile (§2.3).
//
// Every tensor's values are drawn once, independent of the scheme, then encoded:
//   FP8 matrices   E4M3 codes with one UE8M0 scale per 32x32 tile (rows x inputs)
//   routed experts E2M1 codes with one UE8M0 scale per 32 inputs of a row
//   Engram tables  rows of ED E4M3 codes + ED/32 UE8M0 scales (row264 for ED = 256)
//   BF16 weights   bf16-representable values (norms, router, compressor, indexer, embedding,
//                  head, Markov heads, confidence, Engram q/k: what the reference holds in bf16)
//   F32 weights    full fp32 values (HC mixers, bases and scales, sinks, router biases)
// so the f32 profile is the exact dequantization of the lossless one. Statistics follow the
// tt-metal measurements quoted in §6.1: embedding RMS 0.12, per-norm means, fan_in^-1/2 gains.
//
// With --tokenizer-json the shape takes the DeepSeek vocabulary (v41_with_vocab: embedding, head,
// Markov heads and the stub Engram token map over all 129280 ids) and the file carries the
// tokenizer, so text prompts, chat and the server run on it.
//
// The tensors are generated one at a time in memory: this path is meant for the small presets.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/rng.h"
#include "gen-model/gen_model.h"
#include "gen-model/vocab.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "quant/blocks.h"
#include "quant/fp8fp4.h"
#include "quant/quantize.h"

namespace magnetar::genmodel {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Element formats (spec v41.md §4.1) from the quant library.
using quant::e2m1_decode;
using quant::e2m1_encode;
using quant::e4m3_decode;
using quant::e4m3_encode;
using quant::fast_round_scale;
const float kR448 = quant::r448();
const float kR6 = quant::r6();

float bf16_round(float x) {
    return quant::round_bf16(x);
}

// ---- checkpoint formats ----

enum class ckpt_format { fp8_tiles, fp4_experts, engram_rows, bf16, f32 };

ckpt_format format_of(const tensor_spec& s) {
    const std::string& x = s.suffix;
    if (x == "engram_embd.weight") return ckpt_format::engram_rows;
    if (ends_with(x, "_exps.weight")) return ckpt_format::fp4_experts;
    if (x == "attn_q_a.weight" || x == "attn_q_b.weight" || x == "attn_kv.weight" ||
        x == "attn_output_a.weight" || x == "attn_output_b.weight" ||
        ends_with(x, "_shexp.weight") || x == "indexer.attn_q_b.weight" ||
        x == "engram_kv.weight" || x == "dspark_main_proj.weight") {
        return ckpt_format::fp8_tiles;
    }
    if (x.rfind("hc_", 0) == 0 || x == "attn_sinks.weight" || x == "exp_probs_b.bias" ||
        x == "exp_probs_b_vl.bias") {
        return ckpt_format::f32;
    }
    return ckpt_format::bf16;
}

// Mean of a norm weight (tt-metal's checkpoint statistics, spec v41.md §6.1); 1 elsewhere.
float norm_mean(const std::string& x) {
    if (x == "attn_norm.weight") return 0.025f;
    if (x == "ffn_norm.weight") return 0.2f;
    if (x == "attn_q_a_norm.weight") return 0.97f;
    if (x == "attn_kv_a_norm.weight") return 0.4f;
    if (x == "attn_compressor_norm.weight") return 0.6f;
    if (x == "indexer.k_norm.weight") return 0.5f;
    return 1.0f;
}

bool is_norm(const tensor_spec& s) {
    return s.dtype == dtype_class::norm_f32_bf16;
}

// The values of one tensor, in GGUF order (ne[0] fastest), plus the codes of the packed formats.
struct drawn {
    std::vector<float> values;
    std::vector<uint8_t> codes;   // fp4: one E2M1 code per element; engram: the row bytes
    std::vector<uint8_t> scales;  // fp4: one UE8M0 byte per 32 elements of a row
};

drawn draw(const hparams& hp, const tensor_spec& s, uint64_t seed) {
    drawn d;
    uint64_t n = 1;
    for (int64_t x : s.ne) n *= static_cast<uint64_t>(x);
    const int64_t row_len = s.ne[0];
    const int64_t n_rows = static_cast<int64_t>(n) / row_len;
    Rng rng = Rng::derive(seed ^ fnv1a64(s.name.data(), s.name.size()), 0);
    const std::string& x = s.suffix;
    const float fan_in = static_cast<float>(row_len);
    const ckpt_format fmt = format_of(s);

    // Root-mean-square of the drawn values.
    float rms = 1.0f / std::sqrt(fan_in);
    if (x == "token_embd.weight" || x == "dspark_markov_embd.weight") rms = 0.12f;
    if (x == "output.weight") rms = 3.0f / std::sqrt(fan_in);
    if (ends_with(x, "_scale.weight")) rms = 0.1f;
    if (x == "attn_sinks.weight") rms = 0.5f;
    if (x == "exp_probs_b.bias" || x == "exp_probs_b_vl.bias") rms = 0.1f;
    if (x == "engram_embd.weight") rms = 0.1f;

    if (fmt == ckpt_format::engram_rows) {
        // Row bytes: ED E4M3 codes, then ED/32 UE8M0 scales (one per 32 columns of the row).
        const uint32_t ed = hp.v41.engram.head_dim;
        const uint32_t rb = hp.v41.engram.row_bytes();
        d.codes.resize(static_cast<size_t>(n_rows) * rb);
        std::vector<float> v(ed);
        for (int64_t r = 0; r < n_rows; ++r) {
            uint8_t* row = d.codes.data() + static_cast<size_t>(r) * rb;
            for (auto& e : v) e = rms * rng.normal();
            for (uint32_t g = 0; g < ed / 32; ++g) {
                float amax = 1e-4f;
                for (uint32_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[g * 32 + j]));
                const int E = fast_round_scale(amax, kR448);
                for (uint32_t j = 0; j < 32; ++j)
                    row[g * 32 + j] = e4m3_encode(std::ldexp(v[g * 32 + j], -E));
                row[ed + g] = static_cast<uint8_t>(E + 127);
            }
        }
        return d;
    }

    d.values.resize(n);
    if (x == "hc_attn_base.weight" || x == "hc_ffn_base.weight") {
        // pre: sigmoid(-1) per copy; post: 2 sigmoid(0) = 1; combine logits favour the identity
        // so the residual stream is carried through (as the V4 generator does).
        const int64_t n_hc = hp.n_hc;
        for (int64_t i = 0; i < row_len; ++i) {
            float base = 0.0f;
            if (i < n_hc) {
                base = -1.0f;
            } else if (i >= 2 * n_hc) {
                const int64_t k = i - 2 * n_hc;
                base = (k / n_hc == k % n_hc) ? 2.0f : 0.0f;
            }
            d.values[static_cast<size_t>(i)] = base + 0.1f * rng.normal();
        }
        return d;
    }
    if (is_norm(s)) {
        const float m = norm_mean(x);
        for (auto& v : d.values) v = bf16_round(m * (1.0f + 0.1f * rng.normal()));
        return d;
    }
    for (auto& v : d.values) v = rms * rng.normal();

    switch (fmt) {
        case ckpt_format::f32:
        case ckpt_format::engram_rows:
            break;
        case ckpt_format::bf16:
            for (auto& v : d.values) v = bf16_round(v);
            break;
        case ckpt_format::fp8_tiles: {
            // One UE8M0 scale per 32 x 32 tile of the [rows, row_len] matrix.
            for (int64_t r0 = 0; r0 < n_rows; r0 += 32) {
                const int64_t r1 = std::min<int64_t>(n_rows, r0 + 32);
                for (int64_t c0 = 0; c0 < row_len; c0 += 32) {
                    const int64_t c1 = std::min<int64_t>(row_len, c0 + 32);
                    float amax = 1e-4f;
                    for (int64_t r = r0; r < r1; ++r) {
                        for (int64_t c = c0; c < c1; ++c)
                            amax = std::max(
                                amax, std::fabs(d.values[static_cast<size_t>(r * row_len + c)]));
                    }
                    const int E = fast_round_scale(amax, kR448);
                    for (int64_t r = r0; r < r1; ++r) {
                        for (int64_t c = c0; c < c1; ++c) {
                            float& v = d.values[static_cast<size_t>(r * row_len + c)];
                            v = std::ldexp(e4m3_decode(e4m3_encode(std::ldexp(v, -E))), E);
                        }
                    }
                }
            }
            break;
        }
        case ckpt_format::fp4_experts: {
            MAGNETAR_ASSERT(row_len % 32 == 0, "expert rows are whole FP4 groups");
            d.codes.resize(n);
            d.scales.resize(n / 32);
            for (uint64_t g = 0; g < n / 32; ++g) {
                float* v = d.values.data() + g * 32;
                float amax = 6.0f * 0x1p-126f;
                for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
                const int E = fast_round_scale(amax, kR6);
                d.scales[g] = static_cast<uint8_t>(E + 127);
                for (int j = 0; j < 32; ++j) {
                    const float q = std::min(6.0f, std::max(-6.0f, std::ldexp(v[j], -E)));
                    const uint8_t c = e2m1_encode(q);
                    d.codes[g * 32 + static_cast<uint64_t>(j)] = c;
                    v[j] = std::ldexp(e2m1_decode(c), E);
                }
            }
            break;
        }
    }
    return d;
}

// Encodes the drawn values of one tensor as type t.
std::vector<uint8_t> encode(const tensor_spec& s, const drawn& d, ggml_type t) {
    const int64_t row_len = s.ne[0];
    if (t == ggml_type::I8) {
        MAGNETAR_ASSERT(!d.codes.empty(), "I8 storage is for Engram rows");
        return d.codes;
    }
    const size_t n = d.values.size();
    std::vector<uint8_t> out(static_cast<size_t>(*type_bytes(t, n)));
    if (t == ggml_type::MXFP4) {
        // The checkpoint's codes and exponent bytes, repacked: qs[j] = code(j) | code(j+16) << 4.
        MAGNETAR_ASSERT(d.codes.size() == n, "MXFP4 storage is for FP4 experts");
        auto* b = reinterpret_cast<block_mxfp4*>(out.data());
        for (size_t g = 0; g < n / 32; ++g) {
            b[g].e = d.scales[g];
            for (int j = 0; j < 16; ++j) {
                b[g].qs[j] =
                    static_cast<uint8_t>(d.codes[g * 32 + static_cast<size_t>(j)] |
                                         (d.codes[g * 32 + static_cast<size_t>(j) + 16] << 4));
            }
        }
        return out;
    }
    // Float types are converted, the others quantized, by quant's table.
    quantize_rows(t, d.values.data(), out.data(), static_cast<int64_t>(n) / row_len, row_len,
                  nullptr);
    return out;
}

}  // namespace

ggml_type scheme_type_v41(weight_scheme s, const tensor_spec& spec) {
    const ckpt_format fmt = format_of(spec);
    if (fmt == ckpt_format::engram_rows) return ggml_type::I8;
    if (s == weight_scheme::f32) return ggml_type::F32;
    const bool published = s == weight_scheme::published || s == weight_scheme::published_q4;
    switch (fmt) {
        case ckpt_format::engram_rows:
            return ggml_type::I8;
        case ckpt_format::f32:
            return ggml_type::F32;
        case ckpt_format::fp8_tiles:
            return published ? ggml_type::Q8_0 : ggml_type::BF16;
        case ckpt_format::fp4_experts:
            if (s == weight_scheme::published_q4) return ggml_type::Q4_K;
            if (s == weight_scheme::published) {
                return spec.suffix == "ffn_down_exps.weight" ? ggml_type::Q2_K : ggml_type::IQ2_XXS;
            }
            return ggml_type::MXFP4;
        case ckpt_format::bf16:
            // Norms, the Engram gate weights and the confidence head are F32 in both profiles.
            if (is_norm(spec) || spec.suffix == "dspark_conf.weight") return ggml_type::F32;
            return ggml_type::BF16;
    }
    return ggml_type::F32;
}

hparams v41_with_vocab(const hparams& base, uint32_t n_vocab) {
    if (!base.is_v41()) throw Error("gen-model: v41_with_vocab needs a V4.1 shape");
    if (n_vocab < 3)
        throw Error(strfmt(
            "gen-model: vocabulary size %u is too small (the pad token 2 must exist)", n_vocab));
    hparams hp = base;
    hp.n_vocab = n_vocab;
    engram_hparams& e = hp.v41.engram;
    if (!e.layer_ids.empty()) {
        // Stub token map over the whole vocabulary: tokens 2k and 2k+1 normalise alike.
        e.compressed_vocab = (n_vocab + 1) / 2;
        e.token_map.resize(n_vocab);
        for (uint32_t t = 0; t < n_vocab; ++t) e.token_map[t] = static_cast<int32_t>(t / 2);
        e.pad_id = static_cast<uint32_t>(e.token_map[2]);  // raw pad token 2
        const uint64_t bound = e.multiplier_bound();
        for (uint64_t& m : e.multipliers) m = 2 * ((m >> 1) % bound) + 1;
    }
    constexpr uint32_t kReleasedNoiseToken = 128799;  // spec v41.md §1.1
    if (hp.v41.n_dspark > 0 && n_vocab > kReleasedNoiseToken)
        hp.v41.dspark.noise_token_id = kReleasedNoiseToken;
    if (hp.v41.dspark.noise_token_id >= n_vocab) hp.v41.dspark.noise_token_id = n_vocab - 1;
    hp.validate();
    return hp;
}

void generate_v41(const options& opts, const hparams& base) {
    if (opts.weights != weight_scheme::f32 && opts.weights != weight_scheme::lossless &&
        opts.weights != weight_scheme::published && opts.weights != weight_scheme::published_q4) {
        throw Error("gen-model: unresolved weight scheme for a V4.1 preset");
    }
    // With a tokenizer the vocabulary becomes DeepSeek's; the tokenizer is read (and checked)
    // before the output file is created.
    vocab v;
    const bool tokenized = !opts.tokenizer_json.empty();
    if (tokenized) v = load_deepseek_vocab(opts.tokenizer_json, kDeepSeekV4VocabSize);
    const hparams hp =
        tokenized ? v41_with_vocab(base, static_cast<uint32_t>(v.tokens.size())) : base;
    // The keys first: a preset that cannot be written (no token map) fails before any work.
    gguf::writer w(opts.output);
    write_hparams(w, hp);
    if (tokenized) write_vocab(w, v);
    const std::vector<tensor_spec> specs = tensor_catalogue(hp, true);
    std::vector<ggml_type> types;
    uint64_t data_bytes = 0;
    bool quantized = false;
    for (const auto& s : specs) {
        uint64_t n = 1;
        for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
        if (n > (uint64_t{1} << 28)) {
            throw Error(strfmt(
                "gen-model: tensor '%s' has %llu elements; the V4.1 generator holds one tensor "
                "in memory and is meant for small presets",
                s.name.c_str(), static_cast<unsigned long long>(n)));
        }
        ggml_type t = scheme_type_v41(opts.weights, s);
        // Rows that are not whole blocks of the type: experts fall back to their lossless
        // MXFP4, anything else to BF16.
        if (s.ne[0] % type_traits_of(t).block_elems != 0) {
            t = format_of(s) == ckpt_format::fp4_experts ? ggml_type::MXFP4 : ggml_type::BF16;
        }
        quantized = quantized || type_traits_of(t).is_quantized;
        types.push_back(t);
        data_bytes += *type_bytes(t, n);
    }

    if (quantized) w.set("general.quantization_version", gguf::value::make_u32(2));
    w.set("general.generator", gguf::value::make_string(generator_command(opts) +
                                                        (tokenized ? " --tokenizer-json" : "")));
    for (size_t i = 0; i < specs.size(); ++i) w.add_tensor(specs[i].name, types[i], specs[i].ne);

    Progress progress("gen-model " + opts.preset, data_bytes, Progress::Unit::bytes, opts.quiet);
    for (size_t i = 0; i < specs.size(); ++i) {
        const drawn d = draw(hp, specs[i], opts.seed);
        const std::vector<uint8_t> bytes = encode(specs[i], d, types[i]);
        w.write_tensor_data(bytes.data(), bytes.size());
        progress.add(bytes.size());
    }
    w.finish();
    progress.finish();
}

}  // namespace magnetar::genmodel
