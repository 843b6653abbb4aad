// Streaming projection: every fixture at every split position (and byte by byte) gives the
// same result as one feed, agrees with the authoritative parse where the protocol promises
// it, and the hold-back / event-order rules hold.
#include "chat/dsml_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "chat/dsml.h"
#include "dsml_check.h"
#include "dsml_fixtures.h"

namespace magnetar::chat {
namespace {

void expect_same_outcome(const check::stream_outcome& a, const check::stream_outcome& b,
                         const std::string& where) {
    EXPECT_EQ(a.reasoning, b.reasoning) << where;
    EXPECT_EQ(a.content, b.content) << where;
    EXPECT_EQ(a.failed, b.failed) << where;
    EXPECT_EQ(a.done, b.done) << where;
    EXPECT_EQ(a.error, b.error) << where;
    ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].id, b.calls[i].id) << where;
        EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
        EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
        EXPECT_EQ(a.calls[i].complete, b.calls[i].complete) << where;
    }
}

TEST(DsmlStream, OneFeedAgreesWithTheFinalParse) {
    for (const auto& f : fixtures::all()) {
        SCOPED_TRACE(f.name);
        parse_result p = parse_tool_calls(f.text, f.thinking);
        auto s = check::run_stream(f.text, f.thinking, {});
        EXPECT_EQ(check::check_against_parse(f.text, f.thinking, p, s), "");
    }
}

TEST(DsmlStream, EverySplitPositionGivesTheSameResult) {
    for (const auto& f : fixtures::all()) {
        SCOPED_TRACE(f.name);
        parse_result p = parse_tool_calls(f.text, f.thinking);
        auto whole = check::run_stream(f.text, f.thinking, {});
        for (size_t cut = 1; cut < f.text.size(); ++cut) {
            auto s = check::run_stream(f.text, f.thinking, {cut});
            expect_same_outcome(whole, s, "cut at " + std::to_string(cut));
            ASSERT_EQ(check::check_against_parse(f.text, f.thinking, p, s), "") << "cut " << cut;
        }
    }
}

TEST(DsmlStream, ByteByByteGivesTheSameResult) {
    for (const auto& f : fixtures::all()) {
        SCOPED_TRACE(f.name);
        std::vector<size_t> cuts;
        for (size_t i = 1; i < f.text.size(); ++i) cuts.push_back(i);
        auto whole = check::run_stream(f.text, f.thinking, {});
        auto bytes = check::run_stream(f.text, f.thinking, cuts);
        expect_same_outcome(whole, bytes, "byte by byte");
        EXPECT_EQ(check::check_against_parse(f.text, f.thinking,
                                             parse_tool_calls(f.text, f.thinking), bytes),
                  "");
    }
}

TEST(DsmlStream, RandomMultiWaySplitsGiveTheSameResult) {
    std::mt19937 rng(1234);
    for (const auto& f : fixtures::all()) {
        SCOPED_TRACE(f.name);
        auto whole = check::run_stream(f.text, f.thinking, {});
        for (int trial = 0; trial < 100; ++trial) {
            std::vector<size_t> cuts;
            size_t pos = 0;
            while (true) {
                pos += 1 + rng() % 7;
                if (pos >= f.text.size()) break;
                cuts.push_back(pos);
            }
            expect_same_outcome(whole, check::run_stream(f.text, f.thinking, cuts),
                                "trial " + std::to_string(trial));
        }
    }
}

std::vector<std::string> argument_deltas(const std::vector<stream_event>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) {
        if (e.kind == stream_event_kind::tool_call_arguments) out.push_back(e.text);
    }
    return out;
}

TEST(DsmlStream, SpecExampleHeaderThenArgumentDeltas) {
    dsml_stream s;
    auto ev = s.feed(
        "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
        "<｜DSML｜parameter name=\"command\" string=\"true\">echo partial");
    ASSERT_FALSE(ev.empty());
    EXPECT_TRUE(s.tool_block_started());
    ASSERT_EQ(ev[0].kind, stream_event_kind::tool_call_start);
    EXPECT_EQ(ev[0].name, "bash");
    EXPECT_EQ(ev[0].index, 0u);
    EXPECT_EQ(ev[0].id.substr(0, 5), "call_");
    EXPECT_EQ(ev[0].id.size(), 37u);
    std::vector<std::string> deltas = argument_deltas(ev);
    auto more = s.feed(" done</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
    for (auto& d : argument_deltas(more)) deltas.push_back(d);
    EXPECT_EQ(deltas, (std::vector<std::string>{"{", "\"command\":\"", "echo partial", " done",
                                                "\"", "}"}));
    EXPECT_EQ(more.back().kind, stream_event_kind::tool_call_end);
    EXPECT_TRUE(s.tool_block_done());
    EXPECT_TRUE(s.feed("ignored").empty());
    EXPECT_TRUE(s.finish().empty());
    EXPECT_EQ(s.calls()[0].arguments, "{\"command\":\"echo partial done\"}");
}

TEST(DsmlStream, ReasoningStreamsWithoutHoldingOrdinaryText) {
    dsml_stream s;
    auto a = s.feed("We need to generate ");
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].kind, stream_event_kind::reasoning);
    EXPECT_EQ(a[0].text, "We need to generate ");
    auto b = s.feed("a title");
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].text, "a title");
    // A possible </think> is held back until it resolves.
    auto c = s.feed(" now</th");
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].text, " now");
    EXPECT_TRUE(s.in_reasoning());
    auto d = s.feed("ink>Title");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].kind, stream_event_kind::text);
    EXPECT_EQ(d[0].text, "Title");
    auto e = s.feed(" </thin");  // in content a </think> prefix means nothing
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].text, " </thin");
}

TEST(DsmlStream, PartialEntitiesAreHeldInStringValues) {
    dsml_stream s;
    s.feed(
        "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"
        "<｜DSML｜parameter name=\"v\" string=\"true\">");
    EXPECT_EQ(argument_deltas(s.feed("a &amp")), std::vector<std::string>{"a "});
    EXPECT_EQ(argument_deltas(s.feed(";")), std::vector<std::string>{"&"});
    EXPECT_EQ(argument_deltas(s.feed("&am")), std::vector<std::string>{});
    // The '<' may start the closer, so it waits too.
    EXPECT_EQ(argument_deltas(s.feed("x<")), std::vector<std::string>{"&amx"});
    EXPECT_EQ(argument_deltas(s.feed("/｜DSML｜parameter></｜DSML｜invoke>")),
              (std::vector<std::string>{"\"", "}"}));
    EXPECT_EQ(s.calls()[0].arguments, R"({"v":"a &&amx"})");
}

TEST(DsmlStream, PartialUtf8IsHeldEverywhere) {
    dsml_stream s;
    EXPECT_TRUE(s.feed("\xe6\xbc").empty());  // first two bytes of U+6F22
    auto a = s.feed("\xa2</think>\xc3");
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].text, "\xe6\xbc\xa2");
    auto b = s.feed("\xa9");
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].kind, stream_event_kind::text);
    EXPECT_EQ(b[0].text, "\xc3\xa9");
    s.feed(
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"v\" "
        "string=\"true\">");
    EXPECT_TRUE(argument_deltas(s.feed("\xf0\x9f\x8e")).empty());
    EXPECT_EQ(argument_deltas(s.feed("\x89")), std::vector<std::string>{"\xf0\x9f\x8e\x89"});
    // At the end of generation everything held is flushed.
    dsml_stream t(stream_options{false, true, {}});
    EXPECT_TRUE(t.feed("x\xe6").size() == 1);
    auto f = t.finish();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].text, "\xe6");
}

TEST(DsmlStream, SeparatorWhitespaceIsNeverContent) {
    dsml_stream s(stream_options{false, true, {}});
    auto a = s.feed("Answer:  \n");
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].text, "Answer:");
    auto b = s.feed(
        "\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>");
    for (const auto& e : b) EXPECT_NE(e.kind, stream_event_kind::text);
    // Whitespace followed by more text is content after all.
    dsml_stream t(stream_options{false, true, {}});
    EXPECT_EQ(t.feed("hello\n\n")[0].text, "hello");
    EXPECT_EQ(t.feed("world")[0].text, "\n\nworld");
    // A '<' that can no longer start a tool block is emitted at once.
    dsml_stream u(stream_options{false, true, {}});
    EXPECT_EQ(u.feed("a < b")[0].text, "a < b");
    EXPECT_TRUE(u.feed(" <").empty());  // could be the separator and a tool block opener
    EXPECT_EQ(u.feed("p")[0].text, " <p");
}

TEST(DsmlStream, MultipleCallsGetDistinctIds) {
    dsml_stream s;
    s.feed(
        "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n"
        "<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
    ASSERT_EQ(s.calls().size(), 2u);
    EXPECT_NE(s.calls()[0].id, s.calls()[1].id);
    for (const auto& c : s.calls()) {
        EXPECT_EQ(c.id.substr(0, 5), "call_");
        EXPECT_EQ(c.id.size(), 37u);
        EXPECT_EQ(c.arguments, "{}");
        EXPECT_TRUE(c.complete);
    }
    // A generator that repeats itself is retried until the ids differ.
    int n = 0;
    dsml_stream r(
        stream_options{false, true, [&n] { return n++ < 3 ? "call_same" : "call_other"; }});
    r.feed(
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"a\"></｜DSML｜invoke>"
        "<｜DSML｜invoke name=\"b\"></｜DSML｜invoke></｜DSML｜tool_calls>");
    ASSERT_EQ(r.calls().size(), 2u);
    EXPECT_EQ(r.calls()[0].id, "call_same");
    EXPECT_EQ(r.calls()[1].id, "call_other");
}

TEST(DsmlStream, ErrorsStopTheProjection) {
    dsml_stream s(stream_options{false, true, {}});
    auto ev = s.feed("Hi\n<｜DSML｜tool_calls>\n<｜DSML｜foo>");
    ASSERT_EQ(ev.back().kind, stream_event_kind::tool_error);
    EXPECT_TRUE(s.failed());
    EXPECT_TRUE(s.feed("more text").empty());
    EXPECT_TRUE(s.finish().empty());

    dsml_stream t;
    t.feed(
        "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"x\" "
        "string=\"true\">par");
    auto fin = t.finish();
    ASSERT_EQ(fin.size(), 1u);
    EXPECT_EQ(fin[0].kind, stream_event_kind::tool_error);
    EXPECT_EQ(fin[0].text, "unterminated tool call");

    // A parameter without a string attribute stops the projection; the final parse recovers.
    dsml_stream u;
    auto missing = u.feed(
        "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"
        "<｜DSML｜parameter name=\"x\">1</｜DSML｜parameter>");
    EXPECT_EQ(missing.back().kind, stream_event_kind::tool_error);
}

TEST(DsmlStream, DetectionCanBeTurnedOff) {
    std::string block = "x\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>";
    dsml_stream s(stream_options{false, false, {}});
    std::vector<stream_event> ev;
    s.feed(block, &ev);
    s.finish(&ev);
    std::string text;
    for (const auto& e : ev) text += e.text;
    EXPECT_EQ(text, block);
    EXPECT_FALSE(s.tool_block_started());
}

TEST(DsmlStream, LongTagsArrivingByteByByteStayLinear) {
    std::string text = "<｜DSML｜tool_calls><｜DSML｜invoke name=\"" + std::string(50000, 'n') +
                       "\"><｜DSML｜parameter name=\"" + std::string(50000, 'k') +
                       "\" string=\"true\">" + std::string(50000, 'v') +
                       "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>";
    dsml_stream s(stream_options{false, true, {}});
    std::vector<stream_event> ev;
    for (char c : text) s.feed(std::string_view(&c, 1), &ev);
    s.finish(&ev);
    EXPECT_TRUE(s.tool_block_done());
    ASSERT_EQ(s.calls().size(), 1u);
    EXPECT_EQ(s.calls()[0].name.size(), 50000u);
    EXPECT_EQ(s.calls()[0].arguments.size(), 50000u + 50000u + 7u);
}

TEST(DsmlStream, StreamIdsAreCopiedOntoTheParsedCalls) {
    const auto& f = fixtures::all()[1];  // two calls
    dsml_stream s(stream_options{false, true, {}});
    s.feed(f.text);
    s.finish();
    parse_result p = parse_tool_calls(f.text, false);
    ASSERT_EQ(p.calls.size(), 2u);
    p.calls[1].id = "call_kept";
    adopt_stream_ids(&p.calls, s.calls());
    EXPECT_EQ(p.calls[0].id, s.calls()[0].id);
    EXPECT_EQ(p.calls[1].id, "call_kept");
}

TEST(DsmlStream, LeadingThinkTagIsDropped) {
    dsml_stream s;
    std::vector<stream_event> ev;
    s.feed("<thi", &ev);
    s.feed("nk>r</think>c", &ev);
    s.finish(&ev);
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].text, "r");
    EXPECT_EQ(ev[1].text, "c");
    // Without thinking, a leading <think> still opens reasoning.
    dsml_stream t(stream_options{false, true, {}});
    auto a = t.feed("<think>r</think>c");
    ASSERT_EQ(a.size(), 2u);
    EXPECT_EQ(a[0].kind, stream_event_kind::reasoning);
    EXPECT_EQ(a[1].kind, stream_event_kind::text);
    EXPECT_STREQ(stream_event_kind_name(a[1].kind), "text");
}

}  // namespace
}  // namespace magnetar::chat
