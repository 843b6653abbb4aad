// `magnetar quantize`: requantize a DeepSeek V4 GGUF per tensor class (tools/quantize).
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "quantize/quantize_model.h"

namespace magnetar::cli {

namespace {

action setup(CLI::App& sub) {
    auto o = std::make_shared<quantize_tool::options>();
    sub.add_option("input", o->input, "Input GGUF")->required();
    sub.add_option("output", o->output, "Output GGUF");
    sub.add_option("--scheme", o->scheme,
                   "q2: routed experts gate/up IQ2_XXS, down Q2_K (the published q2 files); q4: "
                   "routed experts "
                   "Q4_K; q8: routed experts and every other matrix Q8_0; custom: only --keep "
                   "rules. Tensors "
                   "a scheme does not name keep their type")
        ->capture_default_str();
    sub.add_option("--imatrix", o->imatrix,
                   "Importance matrix (GGML .imatrix or GGUF imatrix) for Q4_K / Q2_K / IQ2_XXS");
    sub.add_option("--keep", o->keep,
                   "PATTERN keeps matching tensors' input type; PATTERN=TYPE gives them TYPE "
                   "(shell glob on the "
                   "tensor name, later rules win), e.g. 'blk.4[0-2].ffn_*_exps.weight=q4_K'");
    sub.add_option("-t,--threads", o->n_threads, "Threads (default: all)");
    sub.add_flag("-q,--quiet", o->quiet, "No progress bar");
    sub.add_flag("--dry-run", o->dry_run, "Print each tensor's type change and write nothing");
    auto overwrite = std::make_shared<bool>(false);
    sub.add_flag("--overwrite", *overwrite, "Replace the output file when it exists");
    return [o, overwrite]() {
        if (o->output.empty() && !o->dry_run)
            throw magnetar::Error("quantize: give an output path (or --dry-run)");
        if (!o->dry_run) check_output(o->output, *overwrite, {o->input});
        quantize_tool::run(*o);
        return 0;
    };
}

}  // namespace

MAGNETAR_COMMAND(quantize, "quantize",
                 "Requantize a model file per tensor class (q2 / q4 / q8 / custom)", setup);

}  // namespace magnetar::cli
