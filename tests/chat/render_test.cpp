// Chat rendering golden tests: the worked examples of the protocol spec (§2.8), the official
// encoder's published outputs (encoding/tests/test_output_{1,2}.txt of the model repository,
// as reproduced by third-party alignment tests) and the rendering rules of docs/chat.md, byte
// for byte. Expected strings spell every literal out instead of reusing library constants.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/chat_tokens.h"
#include "chat/dsml.h"
#include "chat/json_text.h"
#include "chat/renderer.h"

namespace magnetar::chat {
namespace {

const std::string BOS = "<｜begin▁of▁sentence｜>";
const std::string EOS = "<｜end▁of▁sentence｜>";
const std::string USER = "<｜User｜>";
const std::string ASSISTANT = "<｜Assistant｜>";

const std::string kMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

// The official tools section around the schema lines.
std::string tools_section(const std::string& schemas) {
    return "## Tools\n\n"
           "You have access to a set of tools to help answer the user's question. You can invoke "
           "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
           "<｜DSML｜tool_calls>\n"
           "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
           "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
           "</｜DSML｜parameter>\n"
           "...\n"
           "</｜DSML｜invoke>\n"
           "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
           "...\n"
           "</｜DSML｜invoke>\n"
           "</｜DSML｜tool_calls>\n\n"
           "String parameters should be specified as is and set `string=\"true\"`. For all other "
           "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
           "`string=\"false\"`.\n\n"
           "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
           "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
           "Otherwise, output directly after </think> with tool calls or final response.\n\n"
           "### Available Tool Schemas\n\n" +
           schemas +
           "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to "
           "invoke tool calls.\n";
}

message sys(std::string content) {
    message m;
    m.role = role::system;
    m.content = std::move(content);
    return m;
}
message usr(std::string content) {
    message m;
    m.role = role::user;
    m.content = std::move(content);
    return m;
}
message dev(std::string content) {
    message m;
    m.role = role::developer;
    m.content = std::move(content);
    return m;
}
message asst(std::string content, std::string reasoning = "", std::vector<tool_call> calls = {}) {
    message m;
    m.role = role::assistant;
    m.content = std::move(content);
    m.reasoning_content = std::move(reasoning);
    m.tool_calls = std::move(calls);
    return m;
}
message tool(std::string content, std::string id = "") {
    message m;
    m.role = role::tool;
    m.content = std::move(content);
    m.tool_call_id = std::move(id);
    return m;
}

render_options opts(think_mode mode, uint64_t n_ctx = 32768) {
    render_options o;
    o.mode = mode;
    o.n_ctx = n_ctx;
    return o;
}

nlohmann::ordered_json bash_tool() {
    return nlohmann::ordered_json::parse(R"({"type":"function","function":{
        "name":"bash","description":"Run a shell command",
        "parameters":{"type":"object","properties":{"command":{"type":"string"}},
                      "required":["command"]}}})");
}
const std::string kBashSchema =
    R"({"name": "bash", "description": "Run a shell command", "parameters": {"type": "object", )"
    R"("properties": {"command": {"type": "string"}}, "required": ["command"]}})";

// Tools of the official encoder's test case 1.
tool_list weather_tools() {
    return {nlohmann::ordered_json::parse(R"({"type": "function", "function": {
                "name": "get_weather", "description": "Get the weather for a specific location",
                "parameters": {"type": "object", "properties": {
                    "location": {"type": "string", "description": "The city name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                             "description": "Temperature unit"}},
                "required": ["location"]}}})"),
            nlohmann::ordered_json::parse(R"({"type": "function", "function": {
                "name": "search", "description": "Search the web for information",
                "parameters": {"type": "object", "properties": {
                    "query": {"type": "string", "description": "Search query"},
                    "num_results": {"type": "integer",
                                    "description": "Number of results to return"}},
                "required": ["query"]}}})")};
}
const std::string kWeatherSchemas =
    R"({"name": "get_weather", "description": "Get the weather for a specific location", )"
    R"("parameters": {"type": "object", "properties": {"location": {"type": "string", )"
    R"("description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", )"
    R"("fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}})"
    "\n"
    R"({"name": "search", "description": "Search the web for information", )"
    R"("parameters": {"type": "object", "properties": {"query": {"type": "string", )"
    R"("description": "Search query"}, "num_results": {"type": "integer", )"
    R"("description": "Number of results to return"}}, "required": ["query"]}})";

// ----- spec §2.8 worked examples ------------------------------------------------------------

TEST(ChatRender, SpecNonThinkingOneUserMessage) {
    EXPECT_EQ(render_chat({usr("Hello")}, {}, opts(think_mode::nothink)),
              BOS + USER + "Hello" + ASSISTANT + "</think>");
}

TEST(ChatRender, SpecThinkingTwoTurnsDropsOldReasoning) {
    std::vector<message> msgs = {sys("You are terse."), usr("first"),
                                 asst("first answer", "old reasoning"), usr("second")};
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think)),
              BOS + "You are terse." + USER + "first" + ASSISTANT + "</think>first answer" + EOS +
                  USER + "second" + ASSISTANT + "<think>");
}

TEST(ChatRender, SpecThinkMax) {
    std::vector<message> msgs = {sys("You are terse."), usr("Hello")};
    EXPECT_EQ(kMaxPrefix.size(), 476u);
    EXPECT_EQ(std::string(kThinkMaxPrefix), kMaxPrefix);
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think_max, 393216)),
              BOS + kMaxPrefix + "You are terse." + USER + "Hello" + ASSISTANT + "<think>");
}

TEST(ChatRender, ThinkMaxDegradesBelowMinimumContext) {
    std::vector<message> msgs = {sys("You are terse."), usr("Hello")};
    std::string high = BOS + "You are terse." + USER + "Hello" + ASSISTANT + "<think>";
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think_max, 393215)), high);
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think_max, 0)), high);
    EXPECT_EQ(effective_think_mode(think_mode::think_max, 393215), think_mode::think);
    EXPECT_EQ(effective_think_mode(think_mode::think_max, 393216), think_mode::think_max);
    EXPECT_EQ(effective_think_mode(think_mode::nothink, 1 << 30), think_mode::nothink);
}

// §2.8 "thinking with a tool round trip", with the tools section in the official position
// and wording (after the system text, "\n\n" between); every other byte is the spec's.
TEST(ChatRender, SpecToolRoundTripOfficialToolsPlacement) {
    std::vector<message> msgs = {
        sys("SYSTEM TEXT"), usr("inspect"),
        asst("", "need a tool", {{"call_1", "bash", R"({"command":"ls"})"}}),
        tool("a.c\n", "call_1")};
    std::string expected =
        BOS + "SYSTEM TEXT\n\n" + tools_section(kBashSchema) + USER + "inspect" + ASSISTANT +
        "<think>need a tool</think>\n\n" +
        "<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"bash\">\n"
        "<｜DSML｜parameter name=\"command\" string=\"true\">ls</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        EOS + USER + "<tool_result>a.c\n</tool_result>" + ASSISTANT + "<think>";
    EXPECT_EQ(render_chat(msgs, {bash_tool()}, opts(think_mode::think)), expected);
}

// ----- official encoder outputs ------------------------------------------------------------

TEST(ChatRender, OfficialTestOutput1ThinkingWithTools) {
    std::vector<message> msgs = {
        sys("You are a helpful assistant."), usr("What's the weather in Beijing?"),
        asst("",
             "The user wants to know the weather in Beijing. I should use the get_weather tool.",
             {{"", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"}}),
        tool(R"({"temperature": 22, "condition": "sunny", "humidity": 45})"),
        asst("The weather in Beijing is currently sunny with a temperature of 22°C and 45% "
             "humidity.",
             "Got the weather data. Let me format a nice response.")};
    std::string expected =
        BOS + "You are a helpful assistant.\n\n" + tools_section(kWeatherSchemas) + USER +
        "What's the weather in Beijing?" + ASSISTANT +
        "<think>The user wants to know the weather in Beijing. I should use the get_weather "
        "tool.</think>\n\n"
        "<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        EOS + USER +
        R"(<tool_result>{"temperature": 22, "condition": "sunny", "humidity": 45}</tool_result>)" +
        ASSISTANT +
        "<think>Got the weather data. Let me format a nice response.</think>"
        "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity." +
        EOS;
    EXPECT_EQ(render_chat(msgs, weather_tools(), opts(think_mode::think)), expected);
}

TEST(ChatRender, OfficialTestOutput2ThinkingWithoutTools) {
    std::vector<message> msgs = {
        sys("You are a helpful assistant."), usr("Hello"),
        asst("Hi there! How can I help you?", "The user said hello, I should greet back."),
        usr("What is the capital of France?"),
        asst("The capital of France is Paris.",
             "The user asks about the capital of France. It is Paris.")};
    std::string expected = BOS + "You are a helpful assistant." + USER + "Hello" + ASSISTANT +
                           "</think>Hi there! How can I help you?" + EOS + USER +
                           "What is the capital of France?" + ASSISTANT +
                           "<think>The user asks about the capital of France. It is Paris.</think>"
                           "The capital of France is Paris." +
                           EOS;
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think)), expected);
    // The generation prompt for the same conversation before the last answer.
    msgs.pop_back();
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think)),
              BOS + "You are a helpful assistant." + USER + "Hello" + ASSISTANT +
                  "</think>Hi there! How can I help you?" + EOS + USER +
                  "What is the capital of France?" + ASSISTANT + "<think>");
}

TEST(ChatRender, OfficialChatMode) {
    std::vector<message> msgs = {sys("You are a helpful assistant."), usr("Hello"),
                                 asst("Hi there! How can I help you?", "ignored"),
                                 usr("What is the capital of France?"),
                                 asst("The capital of France is Paris.")};
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::nothink)),
              BOS + "You are a helpful assistant." + USER + "Hello" + ASSISTANT +
                  "</think>Hi there! How can I help you?" + EOS + USER +
                  "What is the capital of France?" + ASSISTANT +
                  "</think>The capital of France is Paris." + EOS);
}

TEST(ChatRender, ToolsKeepEveryTurnsReasoning) {
    std::vector<message> msgs = {
        sys("You are a helpful assistant."),
        usr("What's the weather in Beijing?"),
        asst("", "Need the get_weather tool.", {{"", "get_weather", R"({"location": "Beijing"})"}}),
        tool(R"({"temperature": 22})"),
        asst("It is 22°C in Beijing.", "Got it, answer now."),
        usr("And Shanghai?"),
        asst("It is 26°C in Shanghai.", "Same tool, new city.")};
    std::string expected =
        BOS + "You are a helpful assistant.\n\n" + tools_section(kWeatherSchemas) + USER +
        "What's the weather in Beijing?" + ASSISTANT +
        "<think>Need the get_weather tool.</think>\n\n"
        "<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        EOS + USER + R"(<tool_result>{"temperature": 22}</tool_result>)" + ASSISTANT +
        "<think>Got it, answer now.</think>It is 22°C in Beijing." + EOS + USER + "And Shanghai?" +
        ASSISTANT + "<think>Same tool, new city.</think>It is 26°C in Shanghai." + EOS;
    EXPECT_EQ(render_chat(msgs, weather_tools(), opts(think_mode::think)), expected);
}

TEST(ChatRender, ParallelToolResultsJoinedAndSortedByCallOrder) {
    std::vector<message> msgs = {
        sys("S"), usr("weather in Beijing and Shanghai?"),
        asst("Let me check both.", "Two cities, call the tool twice.",
             {{"id_b", "get_weather", R"({"location": "Beijing"})"},
              {"id_s", "get_weather", R"({"location": "Shanghai"})"}}),
        // Results arrive in the opposite order; the render follows the call order.
        tool(R"({"temperature": 26})", "id_s"), tool(R"({"temperature": 22})", "id_b"),
        asst("Beijing 22°C, Shanghai 26°C.", "Both done.")};
    std::string expected =
        BOS + "S\n\n" + tools_section(kWeatherSchemas) + USER + "weather in Beijing and Shanghai?" +
        ASSISTANT +
        "<think>Two cities, call the tool twice.</think>Let me check both.\n\n"
        "<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"location\" string=\"true\">Shanghai</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        EOS + USER + R"(<tool_result>{"temperature": 22}</tool_result>)" + "\n\n" +
        R"(<tool_result>{"temperature": 26}</tool_result>)" + ASSISTANT +
        "<think>Both done.</think>Beijing 22°C, Shanghai 26°C." + EOS;
    EXPECT_EQ(render_chat(msgs, weather_tools(), opts(think_mode::think)), expected);
}

// ----- official layout rules ---------------------------------------------------------------

TEST(ChatRender, ToolsSectionFollowsSystemText) {
    std::string out =
        render_chat({sys("SYS"), usr("hi")}, {bash_tool()}, opts(think_mode::nothink));
    EXPECT_EQ(out,
              BOS + "SYS\n\n" + tools_section(kBashSchema) + USER + "hi" + ASSISTANT + "</think>");
    EXPECT_LT(out.find("SYS"), out.find("## Tools"));
}

TEST(ChatRender, ToolsWithoutSystemMessageGetAnEmptySystemTurn) {
    EXPECT_EQ(render_chat({usr("hi")}, {bash_tool()}, opts(think_mode::nothink)),
              BOS + "\n\n" + tools_section(kBashSchema) + USER + "hi" + ASSISTANT + "</think>");
}

TEST(ChatRender, BareFunctionObjectIsRenderedWhole) {
    auto fn = bash_tool()["function"];
    EXPECT_EQ(render_tool_schemas({fn, bash_tool()}), kBashSchema + "\n" + kBashSchema);
    EXPECT_EQ(render_tools_section({}), "");
}

TEST(ChatRender, UserTextAfterToolResultsJoinsTheSameTurn) {
    std::vector<message> msgs = {usr("go"), asst("", "r", {{"c1", "bash", R"({"command":"ls"})"}}),
                                 tool("out", "c1"), usr("now summarise")};
    std::string out = render_chat(msgs, {}, opts(think_mode::nothink));
    EXPECT_NE(out.find(EOS + USER + "<tool_result>out</tool_result>\n\nnow summarise" + ASSISTANT +
                       "</think>"),
              std::string::npos)
        << out;
}

TEST(ChatRender, ConsecutiveUserMessagesJoinTheSameTurn) {
    EXPECT_EQ(render_chat({usr("a"), usr("b")}, {}, opts(think_mode::nothink)),
              BOS + USER + "a\n\nb" + ASSISTANT + "</think>");
}

TEST(ChatRender, DeveloperIsAUserTurn) {
    EXPECT_EQ(render_chat({sys("S"), dev("follow the rules")}, {}, opts(think_mode::nothink)),
              BOS + "S" + USER + "follow the rules" + ASSISTANT + "</think>");
    // A developer turn followed by a user turn: no assistant marker between them.
    EXPECT_EQ(render_chat({dev("D"), usr("U")}, {}, opts(think_mode::nothink)),
              BOS + USER + "D" + USER + "U" + ASSISTANT + "</think>");
}

TEST(ChatRender, HistoricalDeveloperTurnDroppedWhenThinkingWithoutTools) {
    std::vector<message> msgs = {usr("q1"), asst("a1", "r1"), dev("D"), asst("a2", "r2"),
                                 usr("q2")};
    EXPECT_EQ(render_chat(msgs, {}, opts(think_mode::think)),
              BOS + USER + "q1" + ASSISTANT + "</think>a1" + EOS + "a2" + EOS + USER + "q2" +
                  ASSISTANT + "<think>");
    // With tool context nothing is dropped.
    msgs.insert(msgs.begin(), tool("t"));
    std::string kept = render_chat(msgs, {}, opts(think_mode::think));
    EXPECT_NE(kept.find(USER + "D" + ASSISTANT + "<think>r2</think>a2"), std::string::npos) << kept;
}

TEST(ChatRender, SystemMessagesRenderInPlace) {
    EXPECT_EQ(render_chat({sys("A"), sys("B"), usr("u"), asst("x"), sys("C"), usr("v")}, {},
                          opts(think_mode::nothink)),
              BOS + "AB" + USER + "u" + ASSISTANT + "</think>x" + EOS + "C" + USER + "v" +
                  ASSISTANT + "</think>");
}

TEST(ChatRender, ToolContextFromHistoryKeepsReasoning) {
    // No tools offered, but the history has a tool call: reasoning is kept everywhere.
    std::vector<message> msgs = {usr("q"), asst("", "plan", {{"c", "bash", R"({"command":"ls"})"}}),
                                 tool("out", "c"), asst("done", "seen"), usr("next")};
    std::string out = render_chat(msgs, {}, opts(think_mode::think));
    EXPECT_NE(out.find(ASSISTANT + "<think>plan</think>\n\n<｜DSML｜tool_calls>"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(ASSISTANT + "<think>seen</think>done" + EOS), std::string::npos) << out;
    EXPECT_EQ(out.substr(out.size() - (USER + "next" + ASSISTANT + "<think>").size()),
              USER + "next" + ASSISTANT + "<think>");
}

TEST(ChatRender, EmptyReasoningInToolContext) {
    std::vector<message> msgs = {usr("q"), asst("a"), usr("r")};
    std::string out = render_chat(msgs, {bash_tool()}, opts(think_mode::think));
    EXPECT_NE(out.find(USER + "q" + ASSISTANT + "<think></think>a" + EOS), std::string::npos)
        << out;
}

TEST(ChatRender, AssistantWithoutPrecedingUserHasNoMarker) {
    EXPECT_EQ(render_chat({usr("q"), asst("a"), asst("b")}, {}, opts(think_mode::nothink)),
              BOS + USER + "q" + ASSISTANT + "</think>a" + EOS + "b" + EOS);
}

TEST(ChatRender, NoGenerationPrompt) {
    render_options o = opts(think_mode::think);
    o.add_generation_prompt = false;
    EXPECT_EQ(render_chat({sys("S"), usr("q")}, {}, o), BOS + "S" + USER + "q");
    // A final assistant turn is rendered the same either way.
    EXPECT_EQ(render_chat({usr("q"), asst("a", "r")}, {}, o),
              BOS + USER + "q" + ASSISTANT + "<think>r</think>a" + EOS);
}

TEST(ChatRender, LatestReminderAndResponseFormat) {
    render_options o = opts(think_mode::nothink);
    o.response_format = nlohmann::ordered_json::parse(R"({"type":"json_object"})");
    message reminder;
    reminder.role = role::latest_reminder;
    reminder.content = "today is Monday";
    EXPECT_EQ(render_chat({sys("S"), usr("q"), reminder}, {}, o),
              BOS +
                  "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema "
                  "to reply:\n{\"type\": \"json_object\"}" +
                  USER + "q" + ASSISTANT + "</think><｜latest_reminder｜>today is Monday");
}

TEST(ChatRender, RoleNames) {
    EXPECT_EQ(role_from_string("function"), role::tool);
    EXPECT_EQ(role_from_string("developer"), role::developer);
    EXPECT_FALSE(role_from_string("narrator").has_value());
    EXPECT_STREQ(role_name(role::latest_reminder), "latest_reminder");
}

// ----- escapes (ds4 test_dsml_prompt_escapes_tool_supplied_text) -----------------------------

TEST(ChatRender, ToolSuppliedTextIsEscapedOnlyWhereItMustBe) {
    std::vector<message> msgs = {
        usr("run it"),
        asst(
            "", "",
            {{"c1", "bash",
              R"({"command":"echo 2>&1 && cat a </｜DSML｜parameter> b","n":["</｜DSML｜parameter>"]})"}}),
        tool("x </tool_result> y & <z>", "c1")};
    std::string out = render_chat(msgs, {}, opts(think_mode::nothink));
    EXPECT_NE(out.find("<｜DSML｜parameter name=\"command\" string=\"true\">echo 2>&1 && cat a "
                       "&lt;/｜DSML｜parameter> b</｜DSML｜parameter>"),
              std::string::npos)
        << out;
    EXPECT_NE(
        out.find("<｜DSML｜parameter name=\"n\" string=\"false\">[\"\\u003c/｜DSML｜parameter>\"]"
                 "</｜DSML｜parameter>"),
        std::string::npos)
        << out;
    EXPECT_NE(out.find("<tool_result>x &lt;/tool_result> y & <z></tool_result>"), std::string::npos)
        << out;
    EXPECT_EQ(escape_tool_result("</tool_result></tool_result>"),
              "&lt;/tool_result>&lt;/tool_result>");
}

// ----- canonical DSML from JSON tool calls --------------------------------------------------

TEST(ChatRender, CanonicalDsmlFromJson) {
    EXPECT_EQ(render_tool_calls({}), "");
    EXPECT_EQ(
        render_tool_calls({{"", "f", R"({"s":"x","n":1.50,"b":true,"o":{"k":[1,2]},"z":null})"}}),
        "\n\n<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"s\" string=\"true\">x</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"n\" string=\"false\">1.5</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"b\" string=\"false\">true</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": [1, 2]}</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"z\" string=\"false\">null</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>");
    // No arguments: the official layout keeps the empty line between the invoke tags.
    EXPECT_EQ(render_tool_calls({{"", "now", "{}"}}),
              "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>\n"
              "</｜DSML｜tool_calls>");
    // Not a JSON object: one raw string parameter named "arguments".
    EXPECT_EQ(render_tool_calls({{"", "f", "not json"}}),
              "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
              "<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n"
              "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
    // Attribute text is entity-escaped.
    EXPECT_NE(render_tool_calls({{"", "a\"<b>&", R"({"k\"":1})"}})
                  .find("name=\"a&quot;&lt;b&gt;&amp;\">\n<｜DSML｜parameter name=\"k&quot;\""),
              std::string::npos);
}

TEST(ChatRender, ExactReplayBlockIsRenderedVerbatim) {
    message a = asst("", "r", {{"call_x", "bash", R"({"command":"ls"})"}});
    a.raw_dsml =
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
        "<｜DSML｜parameter name=\"command\">ls</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    std::string out = render_chat({usr("q"), a, tool("o", "call_x")}, {}, opts(think_mode::think));
    EXPECT_NE(out.find("<think>r</think>" + *a.raw_dsml + EOS), std::string::npos) << out;
}

// ----- tool checkpoint: the continuation equals what the next render appends ----------------

TEST(ChatRender, ToolCheckpointSuffixEqualsFutureRender) {
    for (think_mode mode : {think_mode::think, think_mode::nothink}) {
        for (bool replay : {false, true}) {
            std::vector<message> history = {sys("S"), usr("list files")};
            std::string prompt = render_chat(history, {bash_tool()}, opts(mode));
            message a = asst("Sure.", "need ls", {{"call_1", "bash", R"({"command": "ls -l"})"}});
            if (replay) {
                a.raw_dsml =
                    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
                    "<｜DSML｜parameter name=\"command\" string=\"true\">ls -l"
                    "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
            }
            std::string expected = prompt + render_assistant_continuation(a, mode);
            history.push_back(a);
            EXPECT_EQ(render_chat(history, {bash_tool()}, opts(mode)), expected);
            history.push_back(tool("a.c", "call_1"));
            std::string next = render_chat(history, {bash_tool()}, opts(mode));
            EXPECT_EQ(next.substr(0, expected.size()), expected);
        }
    }
}

// ----- Python json.dumps layout ------------------------------------------------------------

TEST(ChatJsonText, PythonDumpsLayout) {
    auto j = [](const char* s) { return python_json_dumps(nlohmann::ordered_json::parse(s)); };
    EXPECT_EQ(j(R"({"b":1,"a":[true,false,null],"c":{}})"),
              R"({"b": 1, "a": [true, false, null], "c": {}})");
    EXPECT_EQ(j("[1.0, 0.5, 1e16, 1e15, 1e-05, 0.0001, -0.0, 2.5e-7, 123.456, 1e300]"),
              "[1.0, 0.5, 1e+16, 1000000000000000.0, 1e-05, 0.0001, -0.0, 2.5e-07, 123.456, "
              "1e+300]");
    EXPECT_EQ(j("[18446744073709551615, -9223372036854775808, 0]"),
              "[18446744073709551615, -9223372036854775808, 0]");
    EXPECT_EQ(j(R"(["é漢", "a\"b\\c", "\u0001\b\f\n\r\t", "/", "\u007f"])"),
              "[\"é漢\", \"a\\\"b\\\\c\", \"\\u0001\\b\\f\\n\\r\\t\", \"/\", \"\x7f\"]");
    EXPECT_EQ(j("[]"), "[]");
    std::string deep(300, '[');
    deep += std::string(300, ']');
    EXPECT_THROW(j(deep.c_str()), std::exception);
}

TEST(ChatJsonText, Helpers) {
    EXPECT_EQ(json_minify(" { \"a b\" : [ 1 , 2 ] , \"c\\\" d\" : 3 } "),
              R"({"a b":[1,2],"c\" d":3})");
    EXPECT_EQ(compact_json_object(R"({ "a" : "x\ny", "b" : [1, 2.5] })"),
              R"({"a":"x\ny","b":[1,2.5]})");
    EXPECT_EQ(compact_json_object("[1]"), "{}");
    EXPECT_EQ(compact_json_object("{bad"), "{}");
    EXPECT_EQ(entity_unescape("&amp;&lt;&gt;&quot;&apos;&nbsp;&&amp"), "&<>\"'&nbsp;&&amp");
    EXPECT_EQ(attr_escape("a&<>\"'"), "a&amp;&lt;&gt;&quot;'");
    EXPECT_EQ(partial_entity_suffix("x&"), 1u);
    EXPECT_EQ(partial_entity_suffix("x&quo"), 4u);
    EXPECT_EQ(partial_entity_suffix("x&quot"), 5u);
    EXPECT_EQ(partial_entity_suffix("x&amp;"), 0u);
    EXPECT_EQ(partial_entity_suffix("x&ax"), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xe6\xbc"), 2u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xe6\xbc\xa2"), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xf0"), 1u);
    EXPECT_EQ(incomplete_utf8_suffix("a\x80"), 0u);
    EXPECT_EQ(partial_marker_suffix("abc</th", "</think>"), 4u);
    EXPECT_EQ(partial_marker_suffix("abc</think>", "</think>"), 0u);
}

}  // namespace
}  // namespace magnetar::chat
