#include "support/tiny_models.h"

#include <map>
#include <mutex>

#include "gen-model/gen_model.h"
#include "gen-model/vocab.h"
#include "support/fixture_cache.h"

namespace magnetar::test {

std::string deepseek_tokenizer_json() {
    return genmodel::find_tokenizer_json();
}

const std::string& tiny_model_with_tokenizer(const std::string& preset,
                                             const std::string& weights) {
    static std::mutex mu;
    static std::map<std::string, std::string> paths;
    std::lock_guard<std::mutex> lock(mu);
    const std::string name = "model-" + preset + "-" + weights + "-tokenizer";
    auto it = paths.find(name);
    if (it != paths.end()) return it->second;
    const std::string json = deepseek_tokenizer_json();
    if (json.empty()) return paths.emplace(name, std::string()).first->second;
    // The generator is linked into this executable: a rebuild may change the bytes.
    const std::string key = std::to_string(hash_inputs({"/proc/self/exe", json}, name + "-seed1"));
    const std::string dir = cached_dir(name, key, [&](const std::string& out) {
        genmodel::options o;
        o.preset = preset;
        o.weights = genmodel::parse_weight_scheme(weights);
        o.seed = 1;
        o.output = out + "/model.gguf";
        o.tokenizer_json = json;
        o.quiet = true;
        genmodel::generate(o);
    });
    return paths.emplace(name, dir + "/model.gguf").first->second;
}

}  // namespace magnetar::test
