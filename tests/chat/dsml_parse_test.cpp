// Authoritative DSML parser: expected results for every fixture, every prefix of the valid
// fixtures, malformed and hostile inputs, ids.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "chat/dsml.h"
#include "chat/json_text.h"
#include "chat/tool_id.h"
#include "dsml_fixtures.h"

namespace magnetar::chat {
namespace {

struct expectation {
    parse_status status;
    std::optional<std::string> reasoning;
    std::string content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const std::map<std::string, expectation>& expectations() {
    static const std::map<std::string, expectation> m = {
        {"canonical_thinking",
         {parse_status::ok, "need ls", "", {{"bash", R"({"command": "ls -la"})"}}}},
        {"content_and_two_calls",
         {parse_status::ok,
          std::nullopt,
          "Let me check both.",
          {{"get_weather", R"({"location": "Beijing", "days": 3})"},
           {"search",
            R"({"query": "rain \"today\"\\n", "opts": {"n":[1,2.5,true,null],"s":"a b"}})"}}}},
        {"entities_and_escaped_closer",
         {parse_status::ok,
          "",
          "",
          {{"bash",
            R"({"command": "echo 2>&1 && a && b </｜DSML｜parameter> &unknown; \"q\" 's' > &amp"})"}}}},
        {"multibyte_text",
         {parse_status::ok,
          "思考 🎉 é",
          "Voilà: 漢字 🎉",
          {{"write", R"({"text": "héllo 漢字 🎉\n\tend", "tags": ["ü","🎉"]})"}}}},
        {"short_markers", {parse_status::ok, "ok", "", {{"read", R"({"path": "/etc/hosts"})"}}}},
        {"plain_xml_markers",
         {parse_status::ok, std::nullopt, "Reading.", {{"read", R"({"path": "a.txt", "n": 10})"}}}},
        {"loose_whitespace", {parse_status::ok, "", "", {{"f", R"({"x": [1,2]})"}}}},
        {"missing_string_attribute",
         {parse_status::ok, "", "", {{"bash", R"({"command": "ls"})"}}}},
        {"nested_parameters",
         {parse_status::ok,
          "",
          "",
          {{"edit", R"({"path": "a.c", "change": {"old": "x", "line": 7}})"}}}},
        {"dsml_quoted_in_reasoning",
         {parse_status::no_tool_calls,
          "I could write <｜DSML｜tool_calls><｜DSML｜invoke name=\"x\"></｜DSML｜invoke>"
          "</｜DSML｜tool_calls> but no.",
          "The answer is 42.",
          {}}},
        {"reasoning_quote_then_real_call",
         {parse_status::ok, "maybe <｜DSML｜tool_calls> here", "", {{"ls", "{}"}}}},
        {"text_after_close_ignored", {parse_status::ok, "", "", {{"a", "{}"}}}},
        {"empty_and_json_values",
         {parse_status::ok,
          "",
          "",
          {{"f",
            R"({"e": null, "w": null, "s": "", "j": {"a":"\u003c/｜DSML｜parameter>"}, "s": "dup"})"}}}},
        {"no_tool_calls_plain",
         {parse_status::no_tool_calls,
          std::nullopt,
          "Just an answer with a < sign and <tool and \n\n",
          {}}},
        {"no_tool_calls_thinking",
         {parse_status::no_tool_calls,
          "We need to generate a title",
          "Title: On <b>bold</b> plans &amp; more",
          {}}},
        {"truncated_reasoning",
         {parse_status::no_tool_calls, "We need to generate a title and then", "", {}}},
        {"unterminated_block", {parse_status::unterminated, {}, {}, {}}},
        {"unknown_tag", {parse_status::malformed, {}, {}, {}}},
        {"invoke_without_name", {parse_status::malformed, {}, {}, {}}},
        {"bad_attributes", {parse_status::malformed, {}, {}, {}}},
        {"tag_name_run_on", {parse_status::malformed, {}, {}, {}}},
        {"mixed_variant_closers", {parse_status::malformed, {}, {}, {}}},
        {"bad_json_parameter", {parse_status::ok, "", "", {{"f", R"({"x": {notjson})"}}}},
        {"text_between_params", {parse_status::malformed, {}, {}, {}}},
    };
    return m;
}

TEST(DsmlParse, EveryFixtureHasItsExpectedResult) {
    for (const auto& f : fixtures::all()) {
        SCOPED_TRACE(f.name);
        auto it = expectations().find(f.name);
        ASSERT_NE(it, expectations().end()) << "no expectation for fixture " << f.name;
        const expectation& e = it->second;
        parse_result r = parse_tool_calls(f.text, f.thinking);
        EXPECT_EQ(parse_status_name(r.status), std::string(parse_status_name(e.status)))
            << r.error << " at " << r.error_offset;
        if (e.status == parse_status::malformed || e.status == parse_status::unterminated) {
            EXPECT_FALSE(r.error.empty());
            EXPECT_TRUE(r.calls.empty());
            EXPECT_TRUE(r.raw_dsml.empty());
            EXPECT_LE(r.error_offset, f.text.size());
            continue;
        }
        EXPECT_EQ(r.reasoning, e.reasoning);
        EXPECT_EQ(r.content, e.content);
        ASSERT_EQ(r.calls.size(), e.calls.size());
        for (size_t i = 0; i < r.calls.size(); ++i) {
            EXPECT_EQ(r.calls[i].name, e.calls[i].first);
            EXPECT_EQ(r.calls[i].arguments, e.calls[i].second);
            EXPECT_TRUE(r.calls[i].id.empty());
        }
        if (r.status == parse_status::ok) {
            // The remembered block is the exact byte range from the tool start to the closer.
            ASSERT_NE(r.tool_start, std::string::npos);
            EXPECT_EQ(f.text.substr(r.tool_start, r.raw_dsml.size()), r.raw_dsml);
            EXPECT_EQ(r.raw_dsml.substr(r.raw_dsml.size() - std::string("tool_calls>").size()),
                      "tool_calls>");
        }
    }
}

TEST(DsmlParse, RawBlockIncludesTheSeparator) {
    const auto& f = fixtures::all()[0];
    parse_result r = parse_tool_calls(f.text, true);
    ASSERT_EQ(r.status, parse_status::ok);
    EXPECT_EQ(r.raw_dsml.substr(0, 2), "\n\n");
    EXPECT_EQ(r.raw_dsml, f.text.substr(f.text.find("\n\n<")));
    EXPECT_EQ(r.variant, dsml_variant::full);
    EXPECT_EQ(parse_tool_calls(fixtures::all()[4].text, true).variant, dsml_variant::short_form);
}

TEST(DsmlParse, EveryPrefixOfAValidBlockIsIncompleteNotMalformed) {
    for (const auto& f : fixtures::all()) {
        if (expectations().at(f.name).status != parse_status::ok) continue;
        SCOPED_TRACE(f.name);
        for (size_t n = 0; n <= f.text.size(); ++n) {
            parse_result r = parse_tool_calls(std::string_view(f.text).substr(0, n), f.thinking);
            EXPECT_NE(r.status, parse_status::malformed)
                << "prefix " << n << ": " << r.error << " at " << r.error_offset;
        }
    }
}

TEST(DsmlParse, RenderedCallsParseBack) {
    std::vector<tool_call> calls = {
        {"", "bash", R"({"command":"echo 2>&1 && x </｜DSML｜parameter> &am; \"q\"\n"})"},
        {"", "f", R"({"n":1.5,"o":{"k":["</｜DSML｜parameter>",null]},"b":false})"},
        {"", "now", "{}"},
        {"", "raw", "not json <"}};
    parse_result r = parse_tool_calls("</think>" + render_tool_calls(calls), true);
    ASSERT_EQ(r.status, parse_status::ok) << r.error;
    ASSERT_EQ(r.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, calls[i].name);
        if (i == 3) {
            EXPECT_EQ(r.calls[i].arguments, R"({"arguments": "not json <"})");
            continue;
        }
        EXPECT_EQ(nlohmann::ordered_json::parse(r.calls[i].arguments),
                  nlohmann::ordered_json::parse(calls[i].arguments));
    }
    // Readers unescape the five entities while the writer escapes only the closer, so a
    // string that literally contains an entity does not survive a canonical round trip.
    r = parse_tool_calls(render_tool_calls({{"", "f", R"({"s":"&amp; &lt;"})"}}), false);
    EXPECT_EQ(r.calls[0].arguments, R"({"s": "& <"})");
}

TEST(DsmlParse, ThinkingGatesToolCalls) {
    std::string block =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke "
        "name=\"a\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    // Thinking without </think>: everything is reasoning, nothing is executable.
    parse_result r = parse_tool_calls("thinking " + block, true);
    EXPECT_EQ(r.status, parse_status::no_tool_calls);
    EXPECT_EQ(r.reasoning, "thinking " + block);
    // The same text without thinking is a call.
    EXPECT_EQ(parse_tool_calls("thinking " + block, false).status, parse_status::ok);
    // Only after the last </think>.
    r = parse_tool_calls("a</think>" + block + "</think>done", true);
    EXPECT_EQ(r.status, parse_status::no_tool_calls);
}

TEST(DsmlParse, FirstPatternWinsNotEarliest) {
    std::string text =
        "<tool_calls><invoke name=\"plain\"></invoke></tool_calls> then "
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"full\"></｜DSML｜invoke></｜DSML｜tool_calls>";
    parse_result r = parse_tool_calls(text, false);
    ASSERT_EQ(r.status, parse_status::ok);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "full");
    EXPECT_EQ(r.content, text.substr(0, text.find(" then") + 5));
}

TEST(DsmlParse, FailuresKeepTheTextVisibleAndReportCompletedInvokes) {
    std::string text =
        "</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n"
        "</｜DSML｜invoke>\n<｜DSML｜bogus>";
    parse_result r = parse_tool_calls(text, true);
    EXPECT_EQ(r.status, parse_status::malformed);
    EXPECT_EQ(r.content, text.substr(8));
    ASSERT_EQ(r.partial_calls.size(), 1u);
    EXPECT_EQ(r.partial_calls[0].name, "a");
    EXPECT_EQ(r.error_offset, text.find("<｜DSML｜bogus>"));
}

TEST(DsmlParse, DeepNestingIsRefusedWithoutRecursionBlowUp) {
    std::string open = "<｜DSML｜parameter name=\"p\">";
    std::string text = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">";
    for (int i = 0; i < 10000; ++i) text += open;
    parse_result r = parse_tool_calls(text, false);
    EXPECT_EQ(r.status, parse_status::malformed);
    // Eight levels are still recovered.
    std::string ok = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">";
    for (int i = 0; i < 8; ++i) ok += open;
    ok += "<｜DSML｜parameter name=\"leaf\" string=\"false\">1</｜DSML｜parameter>";
    for (int i = 0; i < 8; ++i) ok += "</｜DSML｜parameter>";
    ok += "</｜DSML｜invoke></｜DSML｜tool_calls>";
    r = parse_tool_calls(ok, false);
    ASSERT_EQ(r.status, parse_status::ok) << r.error;
    EXPECT_EQ(compact_json_object(r.calls[0].arguments),
              R"({"p":{"p":{"p":{"p":{"p":{"p":{"p":{"p":{"leaf":1}}}}}}}}})");
}

TEST(DsmlParse, HostileInputsNeverCrash) {
    std::vector<std::string> inputs = {
        "",
        "<",
        "\xff\xfe<｜DSML｜tool_calls>\xc3",
        "<｜DSML｜tool_calls>" + std::string(100000, ' '),
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"" + std::string(50000, 'a'),
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"a\"><｜DSML｜parameter name=\"b\" "
        "string=\"false\">" +
            std::string(50000, '['),
        std::string("<｜DSML｜tool_calls>\0<｜DSML｜invoke", 30),
        "<tool_calls><invoke name=\"a\"><parameter name=\"b\"><parameter name=\"c\">",
        "</｜DSML｜tool_calls></｜DSML｜invoke></｜DSML｜parameter>",  // orphan closers
    };
    for (const auto& in : inputs) {
        for (bool thinking : {false, true}) {
            parse_result r = parse_tool_calls(in, thinking);
            if (r.status == parse_status::ok) {
                for (const auto& c : r.calls) (void)compact_json_object(c.arguments);
            }
        }
    }
    EXPECT_EQ(parse_tool_calls(inputs[8], false).status, parse_status::no_tool_calls);
}

TEST(DsmlParse, BadJsonArgumentsBecomeAnEmptyObjectForClients) {
    parse_result r = parse_tool_calls(
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"x\" "
        "string=\"false\">{not json</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
        false);
    ASSERT_EQ(r.status, parse_status::ok);
    EXPECT_EQ(compact_json_object(r.calls[0].arguments), "{}");
    r = parse_tool_calls(fixtures::all()[1].text, false);
    EXPECT_EQ(compact_json_object(r.calls[1].arguments),
              R"({"query":"rain \"today\"\\n","opts":{"n":[1,2.5,true,null],"s":"a b"}})");
}

TEST(DsmlParse, SplitReasoning) {
    std::optional<std::string> reasoning;
    std::string content;
    split_reasoning("<think>r</think>c</think>d", false, &reasoning, &content);
    EXPECT_EQ(reasoning, "r");
    EXPECT_EQ(content, "c</think>d");
    split_reasoning("plain", false, &reasoning, &content);
    EXPECT_FALSE(reasoning.has_value());
    EXPECT_EQ(content, "plain");
    split_reasoning("<think>cut short", true, &reasoning, &content);
    EXPECT_EQ(reasoning, "cut short");
    EXPECT_EQ(content, "");
}

TEST(ToolIds, FormatAndUniqueness) {
    std::string id = make_tool_id(id_style::openai);
    ASSERT_EQ(id.size(), 5u + 32u);
    EXPECT_EQ(id.substr(0, 5), "call_");
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos);
    std::string anth = make_tool_id(id_style::anthropic);
    EXPECT_EQ(anth.substr(0, 6), "toolu_");
    EXPECT_EQ(anth.size(), 6u + 32u);

    std::vector<parsed_tool_call> calls(3);
    calls[1].id = "call_given";
    std::set<std::string> memory;
    assign_missing_ids(&calls, id_style::openai,
                       [&](std::string_view v) { return memory.count(std::string(v)) != 0; });
    EXPECT_EQ(calls[1].id, "call_given");
    std::set<std::string> ids;
    for (const auto& c : calls) ids.insert(c.id);
    EXPECT_EQ(ids.size(), 3u);
}

}  // namespace
}  // namespace magnetar::chat
