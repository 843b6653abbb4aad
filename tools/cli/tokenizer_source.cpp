// Vocabulary sources of the tokenizer commands (see tokenizer_source.h).
#include "cli/tokenizer_source.h"

#include "cli/common.h"
#include "core/error.h"
#include "gen-model/vocab.h"
#include "gguf/gguf.h"

namespace magnetar::cli {

void add_tokenizer_options(CLI::App& sub, tokenizer_source& src) {
    sub.add_option("-m,--model", src.model,
                   std::string("Model GGUF whose tokenizer.ggml.* vocabulary to use (default: "
                               "$MAGNETAR_MODEL or ") +
                       kDefaultModelRelPath + ")");
    sub.add_option("--tokenizer-json", src.tokenizer_json,
                   "Use a DeepSeek tokenizer.json instead of a model, laid out as synthetic models "
                   "carry it (default when no model is found: the copy in node_modules/ of the "
                   "checkout, or $MAGNETAR_TOKENIZER_JSON)");
}

namespace {

std::unique_ptr<tokenizer> from_json(const std::string& path) {
    const genmodel::vocab v = genmodel::load_deepseek_vocab(path);
    return std::make_unique<tokenizer>(v.tokens, v.types, v.merges, "deepseek-v3");
}

std::unique_ptr<tokenizer> from_model(const std::string& path) {
    const auto r = gguf::reader::open(path);
    return tokenizer::from_gguf(*r);
}

}  // namespace

std::unique_ptr<tokenizer> load_tokenizer(const tokenizer_source& src, std::string* from) {
    auto note = [&](const std::string& s) {
        if (from) *from = s;
    };
    if (!src.tokenizer_json.empty()) {
        note(src.tokenizer_json);
        return from_json(src.tokenizer_json);
    }
    std::string model;
    try {
        model = resolve_model_path(src.model);
    } catch (const Error&) {
        const std::string json = genmodel::find_tokenizer_json();
        if (json.empty()) {
            throw Error(std::string("no tokenizer: pass -m MODEL or --tokenizer-json PATH, set "
                                    "MAGNETAR_MODEL, or create the default model ") +
                        kDefaultModelRelPath + " with scripts/setup.sh");
        }
        note(json);
        return from_json(json);
    }
    note(model);
    return from_model(model);
}

}  // namespace magnetar::cli
