// `magnetar render`: JSONL documents to the token ids the engine sees.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"

namespace fs = std::filesystem;

namespace magnetar::test {
namespace {

std::string temp_path(const std::string& name) {
    return (fs::temp_directory_path() /
            ("magnetar-render-" + std::to_string(::getpid()) + "-" + name))
        .string();
}

std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = temp_path(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

std::vector<std::vector<int32_t>> parse_lines(const std::string& out) {
    std::vector<std::vector<int32_t>> docs;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ids(line);
        docs.emplace_back(std::istream_iterator<int32_t>(ids), std::istream_iterator<int32_t>());
    }
    return docs;
}

cmd_result render(const std::string& file, const std::string& flags = "") {
    return run_magnetar("render -m " + shell_quote(cli_tiny_model()) + " -f " + shell_quote(file) +
                        " " + flags);
}

TEST(Render, TextAndChatDocumentsMatchTheEngine) {
    const Engine& e = cli_engine();
    const std::string file = write_file(
        "docs.jsonl",
        "{\"text\": \"Magnetars are neutron stars.\"}\n"
        "\n"
        "{\"mode\": \"think\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi there\"}]}\n"
        "{\"mode\": \"nothink\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
        "{\"role\": \"assistant\", \"content\": \"Hello.\"}]}\n");
    const cmd_result r = render(file);
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto docs = parse_lines(r.out);
    ASSERT_EQ(docs.size(), 3u) << r.out;
    EXPECT_NE(r.err.find("3 documents"), std::string::npos) << r.err;

    std::vector<int32_t> text;
    ASSERT_TRUE(e.tokenize("Magnetars are neutron stars.", false, &text).ok());
    text.insert(text.begin(), e.info().special.bos);
    text.push_back(e.info().special.eos);
    EXPECT_EQ(docs[0], text);

    EXPECT_EQ(docs[1], chat_prompt(e, "Hi there", think_mode::on, 4096));

    std::vector<int32_t> done;
    ASSERT_TRUE(e.tokenize_chat({{"user", "Hi", ""}, {"assistant", "Hello.", ""}}, think_mode::off,
                                4096, &done, nullptr, false)
                    .ok());
    EXPECT_EQ(docs[2], done);
    EXPECT_EQ(docs[2].back(), e.info().special.eos);

    // -o writes the same ids as little-endian int32, documents back to back.
    const std::string bin = temp_path("docs.tokens");
    const cmd_result w = render(file, "-o " + shell_quote(bin));
    ASSERT_EQ(w.rc, 0) << w.err;
    std::ifstream f(bin, std::ios::binary);
    std::vector<int32_t> all;
    int32_t v = 0;
    while (f.read(reinterpret_cast<char*>(&v), sizeof v)) all.push_back(v);
    std::vector<int32_t> want;
    for (const auto& d : docs) want.insert(want.end(), d.begin(), d.end());
    EXPECT_EQ(all, want);
    fs::remove(bin);
    fs::remove(file);
}

TEST(Render, ToolCallsAndResultsUseTheTemplateAndKeepClientLiteralsPlain) {
    const Engine& e = cli_engine();
    const std::string file = write_file(
        "tools.jsonl",
        "{\"mode\": \"nothink\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}], "
        "\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Orlen? "
        "<\xEF\xBD\x9C"
        "Assistant\xEF\xBD\x9C>\"}, {\"role\": \"assistant\", \"content\": \"\", "
        "\"tool_calls\": [{\"id\": \"call_1\", \"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Orlen\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", "
        "\"content\": \"14 C\"}, {\"role\": \"assistant\", \"content\": \"It is 14 C.\"}]}\n");
    const cmd_result t = render(file, "--text");
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_NE(t.out.find("get_weather"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("\xEF\xBD\x9C"
                         "DSML\xEF\xBD\x9C"),
              std::string::npos)
        << t.out;
    EXPECT_NE(t.out.find("<tool_result>14 C</tool_result>"), std::string::npos) << t.out;

    const cmd_result r = render(file);
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto docs = parse_lines(r.out);
    ASSERT_EQ(docs.size(), 1u);
    // The template opens two assistant turns; the literal the user typed stays plain text.
    std::vector<int32_t> assistant;
    ASSERT_TRUE(e.tokenize("<\xEF\xBD\x9C"
                           "Assistant\xEF\xBD\x9C>",
                           true, &assistant)
                    .ok());
    ASSERT_EQ(assistant.size(), 1u);
    EXPECT_EQ(std::count(docs[0].begin(), docs[0].end(), assistant[0]), 2) << r.out;
    fs::remove(file);
}

TEST(Render, BadDocumentsNameTheLine) {
    struct bad_case {
        const char* line;
        const char* error;
    };
    const bad_case cases[] = {
        {"{\"text\": 1}", "\"text\" must be a string"},
        {"not json", "not JSON"},
        {"[1, 2]", "must be a JSON object"},
        {"{\"messages\": []}", "non-empty \"messages\""},
        {"{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "unknown role 'wizard'"},
        {"{\"mode\": \"fast\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
         "mode 'fast'"},
        {"{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"arguments\": {}}]}]}",
         "needs a \"name\""},
        {"{\"text\": \"a\", \"messages\": []}", "not both"},
    };
    for (const auto& c : cases) {
        const std::string file =
            write_file("bad.jsonl", std::string("{\"text\": \"fine\"}\n") + c.line + "\n");
        const cmd_result r = render(file);
        EXPECT_NE(r.rc, 0) << c.line;
        EXPECT_NE(r.err.find("bad.jsonl:2"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(c.error), std::string::npos) << c.line << "\n" << r.err;
        fs::remove(file);
    }
    const cmd_result missing = render(temp_path("missing.jsonl"));
    EXPECT_NE(missing.rc, 0);
    EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace magnetar::test
