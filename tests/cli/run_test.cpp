// `magnetar run` on the tiny model: greedy output equals the API's argmax continuation, seeded
// sampling is reproducible, the default model is found without -m, the diagnostics
// (--dump-tokens, --dump-logprobs, --perplexity-file) print their documented formats, and bad
// flags fail cleanly. Also runs the example program.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "core/paths.h"
#include "magnetar/sampler.h"
#include "support/default_engine.h"
#include "support/reference_decode.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace magnetar {
namespace {

using test::cli_engine;
using test::cli_tiny_model;
using test::run_magnetar;
using test::shell_quote;

std::string model_arg() {
    return "-m " + shell_quote(cli_tiny_model()) + " -t 2 ";
}

std::string bytes_of(const Engine& e, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += e.token_bytes(id);
    return s;
}

TEST(RunText, GreedyEqualsApiArgmax) {
    const Engine& e = cli_engine();
    const auto r =
        run_magnetar("run " + model_arg() + "-p 'Tell me a story.' --temp 0 -n 12 -c 256");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto prompt = test::chat_prompt(e, "Tell me a story.", think_mode::on, 256,
                                          "You are a helpful assistant");
    const auto want = test::greedy_continuation(e, prompt, 12, 256);
    EXPECT_EQ(r.out, bytes_of(e, want) + "\n");
    EXPECT_NE(r.err.find("prefill: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" t/s, generation: "), std::string::npos) << r.err;
}

TEST(RunText, NothinkEmptySystemAndRaw) {
    const Engine& e = cli_engine();
    auto r = run_magnetar("run " + model_arg() + "-p 'abc' -sys '' --nothink --temp 0 -n 6 -c 128");
    ASSERT_EQ(r.rc, 0) << r.err;
    auto prompt = test::chat_prompt(e, "abc", think_mode::off, 128);
    EXPECT_EQ(r.out, bytes_of(e, test::greedy_continuation(e, prompt, 6, 128)) + "\n");

    r = run_magnetar("run " + model_arg() + "--raw -p 'Once upon a time' --temp 0 -n 6 -c 128");
    ASSERT_EQ(r.rc, 0) << r.err;
    prompt.clear();
    ASSERT_TRUE(e.tokenize("Once upon a time", false, &prompt).ok());
    EXPECT_EQ(r.out, bytes_of(e, test::greedy_continuation(e, prompt, 6, 128)) + "\n");
}

TEST(RunText, GenerationCappedAtFreeContext) {
    const Engine& e = cli_engine();
    const std::string text = "one two three four five six seven eight nine ten eleven twelve";
    const auto prompt = test::chat_prompt(e, text, think_mode::off, 64);
    const int64_t ctx = static_cast<int64_t>(prompt.size()) + 4;
    ASSERT_GE(ctx, 16);
    const auto r = run_magnetar("run " + model_arg() + "-p '" + text +
                                "' -sys '' --nothink --temp 0 -n 1000 -c " + std::to_string(ctx));
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto want = test::greedy_continuation(e, prompt, 1000, ctx);
    EXPECT_LE(want.size(), 3u);
    EXPECT_EQ(r.out, bytes_of(e, want) + "\n");
}

TEST(RunText, SeedIsReproducible) {
    const std::string args = "run " + model_arg() + "-p 'Pick a number' -n 10 -c 256 --seed 1234";
    const auto a = run_magnetar(args);
    const auto b = run_magnetar(args);
    ASSERT_EQ(a.rc, 0) << a.err;
    ASSERT_EQ(b.rc, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
}

TEST(RunText, PromptFileAndDefaultModel) {
    // No -m: the default model is found as models/magnetar-tiny.gguf above the working folder.
    const std::string dir = test::temp_dir() + "/checkout";
    std::filesystem::create_directories(dir + "/models/sub");
    std::filesystem::create_symlink(cli_tiny_model(), dir + "/models/magnetar-tiny.gguf");
    { std::ofstream(dir + "/prompt.txt") << "Tell me a story."; }
    const auto r =
        run_magnetar("run --prompt-file ../../prompt.txt --temp 0 -n 5 -c 256 -t 2 2>/dev/null",
                     dir + "/models/sub");
    ASSERT_EQ(r.rc, 0) << r.err;
    const Engine& e = cli_engine();
    const auto prompt = test::chat_prompt(e, "Tell me a story.", think_mode::on, 256,
                                          "You are a helpful assistant");
    EXPECT_EQ(r.out, bytes_of(e, test::greedy_continuation(e, prompt, 5, 256)) + "\n");
}

// --mtp-draft on the trained default model (it has an MTP block that has learned something):
// the text is the same with and without speculation, greedy and seeded sampled, and the MTP line
// follows the timing line.
TEST(RunText, MtpDraftKeepsTheOutput) {
    MAGNETAR_REQUIRE_DEFAULT_MODEL();
    const std::string m =
        "-m " + shell_quote(find_in_ancestors("models/magnetar-tiny.gguf")) + " -t 2 ";
    for (const std::string sampling : {"--temp 0", "--temp 0.8 --seed 7",
                                       "--temp 0 --repeat-penalty 1.3 --frequency-penalty 0.4"}) {
        const std::string args =
            "run " + m + "-p 'What is a magnetar?' --nothink -n 60 -c 512 " + sampling;
        const auto plain = run_magnetar(args);
        ASSERT_EQ(plain.rc, 0) << plain.err;
        EXPECT_EQ(plain.err.find("mtp: "), std::string::npos) << plain.err;
        for (const std::string draft : {"1", "2", "3"}) {
            const auto r = run_magnetar(args + " --mtp-draft " + draft);
            ASSERT_EQ(r.rc, 0) << r.err;
            EXPECT_EQ(r.out, plain.out) << sampling << " --mtp-draft " + draft;
            const char* line = draft == "1" ? " drafts matched the next token (" : " drafts kept (";
            EXPECT_NE(r.err.find(std::string("mtp: ")), std::string::npos) << r.err;
            EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
        }
    }
    // A model without an MTP block, and --no-mtp with --mtp-draft, are refused at the start.
    auto r = run_magnetar("run " + model_arg() + "-p hi -n 4 -c 128 --mtp-draft 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("needs an MTP block"), std::string::npos) << r.err;
    r = run_magnetar("run " + m + "-p hi -n 4 -c 128 --no-mtp --mtp-draft 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
    r = run_magnetar("run " + m + "-p hi -n 4 -c 128 --mtp-draft 17");
    EXPECT_NE(r.rc, 0);
}

TEST(RunText, PenaltiesFollowTheirRules) {
    const Engine& e = cli_engine();
    const auto prompt = test::chat_prompt(e, "Tell me a story.", think_mode::on, 256,
                                          "You are a helpful assistant");
    const auto plain = bytes_of(e, test::greedy_continuation(e, prompt, 16, 256));
    struct knobs {
        std::string flags;
        test::penalties pen;  // what the flags ask for
    };
    const std::vector<knobs> cases = {
        // A random model does not repeat itself: a penalty below 1 makes it, then the others
        // and the window have repeats to act on.
        {"--repeat-penalty 0.2", {0.2, 0, 0, 64}},
        {"--repeat-penalty 0.2 --repeat-last-n 3", {0.2, 0, 0, 3}},
        {"--repeat-penalty 0.3 --presence-penalty 1.5 --frequency-penalty 0.5",
         {0.3, 1.5, 0.5, 64}},
        {"--repeat-penalty 0.25 --frequency-penalty 2 --repeat-last-n -1", {0.25, 0, 2, -1}},
        {"--repeat-penalty 1.5 --presence-penalty -2", {1.5, -2, 0, 64}},
    };
    bool any_changed = false;
    for (const knobs& k : cases) {
        const auto r = run_magnetar("run " + model_arg() + "-p 'Tell me a story.' --temp 0 -n 16 " +
                                    "-c 256 " + k.flags);
        ASSERT_EQ(r.rc, 0) << r.err;
        const auto want = bytes_of(e, test::penalised_greedy(e, prompt, 16, 256, k.pen));
        EXPECT_EQ(r.out, want + "\n") << k.flags;
        any_changed = any_changed || want != plain;
    }
    EXPECT_TRUE(any_changed) << "no penalty changed the greedy reply: the test proves nothing";
    // A window of 0 turns every penalty off.
    const auto r = run_magnetar("run " + model_arg() +
                                "-p 'Tell me a story.' --temp 0 -n 16 -c 256 --repeat-penalty 3 "
                                "--presence-penalty 2 --repeat-last-n 0");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, plain + "\n");
}

TEST(RunText, StopEndsTheReplyBeforeTheMatch) {
    const Engine& e = cli_engine();
    const auto prompt = test::chat_prompt(e, "Tell me a story.", think_mode::on, 256,
                                          "You are a helpful assistant");
    const std::string full = bytes_of(e, test::greedy_continuation(e, prompt, 16, 256));
    ASSERT_GE(full.size(), 12u) << full;
    const std::string base = "run " + model_arg() + "-p 'Tell me a story.' --temp 0 -n 16 -c 256 ";
    // Stops that start in the middle of the text and span token boundaries: the reply ends
    // right before the first match, the stop itself is not printed.
    for (const size_t at : {full.size() / 3, full.size() / 2, full.size() - 4}) {
        const std::string stop = full.substr(at, 3);
        const auto r = run_magnetar(base + "--stop " + shell_quote(stop));
        ASSERT_EQ(r.rc, 0) << r.err;
        EXPECT_EQ(r.out, full.substr(0, full.find(stop)) + "\n") << "stop " << stop;
    }
    // Repeatable: the earliest match of any of them wins; a stop never seen changes nothing.
    const std::string late = full.substr(full.size() - 3), early = full.substr(full.size() / 2, 2);
    auto r = run_magnetar(base + "--stop " + shell_quote(late) + " --stop " + shell_quote(early));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, full.substr(0, std::min(full.find(late), full.find(early))) + "\n");
    r = run_magnetar(base + "--stop 'never in this reply \x01'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, full + "\n");
}

TEST(RunDiagnostics, DumpTokens) {
    const Engine& e = cli_engine();
    const std::string text = "<｜User｜>Hello world<｜Assistant｜></think>";
    const auto r = run_magnetar("run " + model_arg() + "--dump-tokens -p " + shell_quote(text));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<int32_t> ids;
    ASSERT_TRUE(e.tokenize(text, true, &ids).ok());
    std::string want = "[";
    for (size_t i = 0; i < ids.size(); ++i) want += (i ? ", " : "") + std::to_string(ids[i]);
    want += "]\n";
    for (int32_t id : ids) {
        char head[32];
        std::snprintf(head, sizeof head, "%6d  ", id);
        want += head + e.vocab()->token_text(id);
        want += "\n";
    }
    EXPECT_EQ(r.out, want);
    EXPECT_NE(r.out.find("  Ġworld\n"), std::string::npos) << r.out;  // byte-level form
}

TEST(RunDiagnostics, DumpLogprobsJson) {
    const Engine& e = cli_engine();
    const std::string file = test::temp_dir() + "/lp.json";
    const auto r = run_magnetar("run " + model_arg() +
                                "-p 'Ciao' -sys '' --nothink -n 4 -c 512 --dump-logprobs " +
                                shell_quote(file) + " --logprobs-top-k 5");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in);
    const auto prompt = test::chat_prompt(e, "Ciao", think_mode::off, 512);
    EXPECT_EQ(j.at("source"), "magnetar");
    EXPECT_EQ(j.at("prompt_tokens").get<size_t>(), prompt.size());
    EXPECT_EQ(j.at("ctx").get<int>(), 512);
    EXPECT_EQ(j.at("top_k").get<int>(), 5);
    ASSERT_EQ(j.size(), 5u);

    // The same greedy steps through the API.
    session_options so;
    so.n_ctx = 512;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(e.create_session(so, &s).ok());
    ASSERT_TRUE(s->eval(prompt).ok());
    const auto& steps = j.at("steps");
    ASSERT_GE(steps.size(), 1u);
    ASSERT_LE(steps.size(), 4u);
    for (size_t i = 0; i < steps.size(); ++i) {
        const auto& st = steps[i];
        EXPECT_EQ(st.at("step").get<size_t>(), i);
        const int32_t greedy = s->argmax();
        const auto& sel = st.at("selected");
        EXPECT_EQ(sel.at("id").get<int32_t>(), greedy);
        const std::string bytes = e.token_bytes(greedy);
        std::vector<int> want_bytes(bytes.begin(), bytes.end());
        for (int& b : want_bytes) b &= 0xFF;
        EXPECT_EQ(sel.at("bytes").get<std::vector<int>>(), want_bytes);
        if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) < 0x80) {
            EXPECT_EQ(sel.at("text").get<std::string>(), bytes);
        }
        const auto top = s->top_logprobs(5);
        const auto& jt = st.at("top_logprobs");
        ASSERT_EQ(jt.size(), top.size());
        for (size_t k = 0; k < top.size(); ++k) {
            EXPECT_EQ(jt[k].at("token").at("id").get<int32_t>(), top[k].id);
            EXPECT_NEAR(jt[k].at("logit").get<double>(), top[k].logit,
                        1e-7 * std::max(1.0, std::fabs(double(top[k].logit))));
            EXPECT_NEAR(jt[k].at("logprob").get<double>(), top[k].logprob,
                        1e-7 * std::max(1.0, std::fabs(top[k].logprob)));
        }
        if (greedy == e.info().special.eos) {
            EXPECT_EQ(i + 1, steps.size()) << "EOS is the last step";
            break;
        }
        ASSERT_TRUE(s->eval(std::span<const int32_t>(&greedy, 1)).ok());
    }
}

TEST(RunDiagnostics, PerplexityLine) {
    const Engine& e = cli_engine();
    std::string text;
    for (int i = 0; i < 12; ++i) text += "The quick brown fox jumps over the lazy dog. ";
    const std::string file = test::temp_dir() + "/ppl.txt";
    std::ofstream(file) << text;
    const auto r = run_magnetar("run " + model_arg() + "--perplexity-file " + shell_quote(file) +
                                " -n 40 -c 512");
    ASSERT_EQ(r.rc, 0) << r.err;

    std::vector<int32_t> ids;
    ASSERT_TRUE(e.tokenize(text, false, &ids).ok());
    ASSERT_GT(ids.size(), 72u);
    session_options so;
    so.n_ctx = 128;
    so.all_logits = true;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(e.create_session(so, &s).ok());
    ASSERT_TRUE(s->eval(std::span<const int32_t>(ids.data(), 72)).ok());
    double nll = 0;
    for (int i = 31; i < 71; ++i) nll -= token_logprob_of(s->logits_at(i), ids[i + 1]);
    char want[256];
    std::snprintf(want, sizeof want, "tokens=%zu scored=40 nll=", ids.size());
    ASSERT_EQ(r.out.rfind(want, 0), 0u) << r.out;
    double got_nll = 0, avg = 0, ppl = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str() + std::strlen(want), "%lf avg_nll=%lf ppl=%lf", &got_nll,
                          &avg, &ppl),
              3)
        << r.out;
    EXPECT_NEAR(got_nll, nll, 1e-5 * std::max(1.0, nll));
    EXPECT_NEAR(avg, nll / 40, 1e-5);
    EXPECT_NEAR(ppl, std::exp(nll / 40), 1e-4 * std::exp(nll / 40));
}

TEST(RunErrors, CleanMessagesAndExitCodes) {
    const std::string file = test::temp_dir() + "/p.txt";
    std::ofstream(file) << "x";
    struct bad {
        std::string args;
        std::string message;
    };
    const std::vector<bad> cases = {
        {"run -p x --prompt-file " + shell_quote(file), "excludes"},
        {"run --prompt-file /nonexistent/prompt.txt", "/nonexistent/prompt.txt"},
        {"run", "no input"},
        {"run -p x --tokens /nonexistent.json", "/nonexistent.json"},
        {"run -p x -m /nonexistent/model.gguf", "/nonexistent/model.gguf"},
        {"run -p x --logprobs-top-k 500 --dump-logprobs /tmp/x.json", "logprobs-top-k"},
        {"run -p x --think --nothink", "excludes"},
        {"run --dump-tokens --perplexity-file " + shell_quote(file), "--dump-tokens needs"},
        {"run -p x -n -3", "n-predict"},
        {"run -p x --repeat-penalty 0", "between 0.01 and 100"},
        {"run -p x --presence-penalty 3", "between -2 and 2"},
        {"run -p x --frequency-penalty -2.5", "between -2 and 2"},
        {"run -p x --repeat-last-n -2", "at least -1"},
        {"run -p x --stop", "--stop"},
    };
    for (const bad& c : cases) {
        const auto r = run_magnetar(c.args);
        EXPECT_GT(r.rc, 0) << c.args;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    }
}

TEST(Example, SimpleRunsOnTinyModel) {
    std::string out;
    const std::string bin = std::string(MAGNETAR_BIN_DIR) + "/magnetar_simple";
    ASSERT_EQ(test::run_command(bin + " " + shell_quote(cli_tiny_model()) + " Hello 8", &out), 0)
        << out;
    EXPECT_FALSE(out.empty());
}

}  // namespace
}  // namespace magnetar
