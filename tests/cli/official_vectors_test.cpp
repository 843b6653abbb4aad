// The official DeepSeek V4 Flash continuation vectors (protocol §7.5, shared
// golden/official-vectors). The fixture parser always runs; the comparison runs only when
// MAGNETAR_TEST_MODEL names a real DeepSeek V4 Flash GGUF and is skipped otherwise.
//
// Comparison (ds4's --logprob-vectors): prompt = one user turn, empty system, thinking off;
// a session of the case's context; at every step the local greedy token's bytes equal the
// official selected token, every official alternative appears (by bytes) among the local
// top 20 with |local - official| <= 4 nats; then the local greedy token is evaluated.
// long_memory_archive is informational (the hosted API and the official graph disagree).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

struct vec_top {
    std::string bytes;
    double logprob = 0;
};
struct vec_step {
    std::string selected;
    std::vector<vec_top> top;
};
struct vec_case {
    std::string id;
    int64_t n_ctx = 0;
    std::string prompt_path;
    std::vector<vec_step> steps;
};

std::string vectors_dir() {
    return test::shared_dir() + "/golden/official-vectors";
}

std::string unhex(const std::string& h) {
    if (h.size() % 2 != 0) throw std::runtime_error("odd hex length: " + h);
    std::string out;
    for (size_t i = 0; i < h.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
    }
    return out;
}

// official.vec: "case <id> <ctx> <steps> <prompt-file>", "step <i> <hex> <n>", n x
// "top <hex> <logprob>", "end"; '#' comments. Prompt paths name ds4's tree: the file is
// prompts/<basename> here.
std::vector<vec_case> parse_vectors(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::vector<vec_case> cases;
    std::string line;
    int lineno = 0;
    auto fail = [&](const std::string& why) {
        throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + why);
    };
    while (std::getline(in, line)) {
        ++lineno;
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        std::string kw;
        ls >> kw;
        if (kw == "case") {
            vec_case c;
            size_t n_steps = 0;
            std::string prompt;
            if (!(ls >> c.id >> c.n_ctx >> n_steps >> prompt)) fail("bad case line");
            c.prompt_path =
                vectors_dir() + "/prompts/" + std::filesystem::path(prompt).filename().string();
            c.steps.reserve(n_steps);
            cases.push_back(std::move(c));
        } else if (kw == "step") {
            if (cases.empty()) fail("step outside a case");
            size_t i = 0, n_top = 0;
            std::string hex;
            if (!(ls >> i >> hex >> n_top) || i != cases.back().steps.size()) fail("bad step");
            cases.back().steps.push_back({unhex(hex), {}});
        } else if (kw == "top") {
            if (cases.empty() || cases.back().steps.empty()) fail("top outside a step");
            std::string hex;
            double lp = 0;
            if (!(ls >> hex >> lp)) fail("bad top line");
            cases.back().steps.back().top.push_back({unhex(hex), lp});
        } else if (kw != "end") {
            fail("unknown keyword " + kw);
        }
    }
    return cases;
}

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(OfficialVectors, FixtureParses) {
    const auto cases = parse_vectors(vectors_dir() + "/official.vec");
    ASSERT_EQ(cases.size(), 5u);
    for (const vec_case& c : cases) {
        EXPECT_TRUE(std::filesystem::exists(c.prompt_path)) << c.prompt_path;
        EXPECT_GT(c.n_ctx, 0);
        ASSERT_FALSE(c.steps.empty()) << c.id;
        for (const vec_step& s : c.steps) {
            EXPECT_FALSE(s.selected.empty()) << c.id;
            ASSERT_FALSE(s.top.empty()) << c.id;
            EXPECT_EQ(s.top[0].bytes, s.selected) << c.id;
        }
    }
    EXPECT_EQ(cases[0].id, "short_italian_fact");
    EXPECT_EQ(cases[0].steps[1].selected, " Lov");
}

TEST(OfficialVectors, RealModelMatchesOfficialLogprobs) {
    const char* model = std::getenv("MAGNETAR_TEST_MODEL");
    if (model == nullptr || *model == '\0') {
        GTEST_SKIP() << "set MAGNETAR_TEST_MODEL to a DeepSeek V4 Flash GGUF to compare with the "
                        "official API vectors";
    }
    engine_options eo;
    eo.model_path = model;
    std::unique_ptr<Engine> engine;
    const status ls = Engine::load(eo, &engine);
    ASSERT_TRUE(ls.ok()) << ls.message();
    if (engine->info().n_vocab != 129280 || engine->info().n_layer != 43) {
        GTEST_SKIP() << model << " is not DeepSeek V4 Flash (" << engine->info().n_layer
                     << " layers); the official vectors need the real model";
    }

    const auto cases = parse_vectors(vectors_dir() + "/official.vec");
    for (const vec_case& c : cases) {
        SCOPED_TRACE(c.id);
        const bool informational = c.id == "long_memory_archive";
        const std::string text =
            Engine::render_chat({{"user", read_all(c.prompt_path), ""}}, think_mode::off,
                                static_cast<uint64_t>(c.n_ctx));
        std::vector<int32_t> prompt;
        ASSERT_TRUE(engine->tokenize(text, true, &prompt).ok());
        session_options so;
        so.n_ctx = c.n_ctx;
        std::unique_ptr<Session> s;
        ASSERT_TRUE(engine->create_session(so, &s).ok());
        ASSERT_TRUE(s->sync(prompt).ok());
        int failures = 0;
        for (size_t i = 0; i < c.steps.size(); ++i) {
            const vec_step& st = c.steps[i];
            const int32_t greedy = s->argmax();
            const auto top = s->top_logprobs(20);
            std::string problems;
            if (engine->token_bytes(greedy) != st.selected) {
                problems += "step " + std::to_string(i) + ": greedy token \"" +
                            engine->token_bytes(greedy) + "\", official \"" + st.selected + "\"\n";
            }
            for (const vec_top& ot : st.top) {
                bool found = false;
                for (const token_logprob& t : top) {
                    if (engine->token_bytes(t.id) != ot.bytes) continue;
                    found = true;
                    if (std::fabs(t.logprob - ot.logprob) > 4.0) {
                        problems += "step " + std::to_string(i) + ": \"" + ot.bytes +
                                    "\" logprob " + std::to_string(t.logprob) + ", official " +
                                    std::to_string(ot.logprob) + "\n";
                    }
                }
                if (!found) {
                    problems += "step " + std::to_string(i) + ": \"" + ot.bytes +
                                "\" not in the local top 20\n";
                }
            }
            if (!problems.empty()) {
                ++failures;
                if (informational) {
                    std::printf("[informational] %s: %s", c.id.c_str(), problems.c_str());
                } else {
                    ADD_FAILURE() << problems;
                }
            }
            if (i + 1 < c.steps.size()) {
                ASSERT_TRUE(s->eval(std::span<const int32_t>(&greedy, 1)).ok());
            }
        }
        std::printf("%s: %zu steps, %d mismatching\n", c.id.c_str(), c.steps.size(), failures);
    }
}

}  // namespace
}  // namespace magnetar
