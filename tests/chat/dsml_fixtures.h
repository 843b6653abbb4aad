// DSML fixtures shared by the parser and stream tests: model outputs covering the canonical
// layout, the accepted slips (short and plain markers, loose whitespace, missing string
// attribute, nested parameters), entities, multi-byte text, DSML quoted inside reasoning and
// malformed blocks. Every stream test runs every fixture at every split position.
#pragma once

#include <string>
#include <vector>

namespace magnetar::chat::fixtures {

struct fixture {
    const char* name;
    std::string text;
    bool thinking;
};

inline const std::vector<fixture>& all() {
    static const std::vector<fixture> list = {
        {"canonical_thinking",
         "need ls</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
         "<｜DSML｜parameter name=\"command\" string=\"true\">ls -la</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"content_and_two_calls",
         "Let me check both.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
         "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"search\">\n"
         "<｜DSML｜parameter name=\"query\" string=\"true\">rain \"today\"\\n</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"n\": [1, 2.5, true, null], "
         "\"s\": \"a b\"}</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         false},
        {"entities_and_escaped_closer",
         "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"bash\">"
         "<｜DSML｜parameter name=\"command\" string=\"true\">echo 2>&1 && a &amp;&amp; b "
         "&lt;/｜DSML｜parameter> &unknown; &quot;q&quot; &apos;s&apos; &gt; &amp"
         "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
         true},
        {"multibyte_text",
         "思考 🎉 é</think>Voilà: 漢字 🎉\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n"
         "<｜DSML｜parameter name=\"text\" string=\"true\">héllo 漢字 "
         "🎉\n\tend</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"tags\" string=\"false\">[\"ü\", \"🎉\"]</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"short_markers",
         "ok</think>\n\n<DSML｜tool_calls>\n<DSML｜invoke name=\"read\">\n"
         "<DSML｜parameter name=\"path\" string=\"true\">/etc/hosts</DSML｜parameter>\n"
         "</DSML｜invoke>\n</DSML｜tool_calls>",
         true},
        {"plain_xml_markers",
         "Reading.\n<tool_calls>\n<invoke name=\"read\">\n"
         "<parameter name=\"path\" string=\"true\">a.txt</parameter>\n"
         "<parameter name=\"n\" string=\"false\">10</parameter>\n"
         "</invoke>\n</tool_calls>",
         false},
        {"loose_whitespace",
         "</think>  \n<｜DSML｜tool_calls>  \n\t<｜DSML｜invoke   name = \"f\"  >\n\n"
         "  <｜DSML｜parameter string=\"false\"  name=\"x\" > [ 1 ,\n 2 ] </｜DSML｜parameter>\r\n"
         "</｜DSML｜invoke>   </｜DSML｜tool_calls>",
         true},
        {"missing_string_attribute",
         "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
         "<｜DSML｜parameter name=\"command\">ls</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"nested_parameters",
         "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"edit\">\n"
         "<｜DSML｜parameter name=\"path\" string=\"true\">a.c</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"change\">\n"
         "<｜DSML｜parameter name=\"old\" string=\"true\">x</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"line\" string=\"false\">7</｜DSML｜parameter>\n"
         "</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"dsml_quoted_in_reasoning",
         "I could write <｜DSML｜tool_calls><｜DSML｜invoke name=\"x\"></｜DSML｜invoke>"
         "</｜DSML｜tool_calls> but no.</think>The answer is 42.",
         true},
        {"reasoning_quote_then_real_call",
         "maybe <｜DSML｜tool_calls> here</think>\n\n<｜DSML｜tool_calls>\n"
         "<｜DSML｜invoke name=\"ls\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"text_after_close_ignored",
         "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n"
         "</｜DSML｜tool_calls>\ntrailing words<｜DSML｜tool_calls>",
         true},
        {"empty_and_json_values",
         "</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
         "<｜DSML｜parameter name=\"e\" string=\"false\"></｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"w\" string=\"false\">  </｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"s\" string=\"true\"></｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"j\" string=\"false\">{\"a\": \"\\u003c/｜DSML｜parameter>\"}"
         "</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"s\" string=\"true\">dup</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         true},
        {"no_tool_calls_plain", "Just an answer with a < sign and <tool and \n\n", false},
        {"no_tool_calls_thinking",
         "We need to generate a title</think>Title: On <b>bold</b> plans &amp; more", true},
        {"truncated_reasoning", "We need to generate a title and then", true},
        {"unterminated_block",
         "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
         "<｜DSML｜parameter name=\"command\" string=\"true\">echo partial",
         true},
        {"unknown_tag",
         "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜foo name=\"x\">\n</｜DSML｜tool_calls>", true},
        {"invoke_without_name",
         "</think><｜DSML｜tool_calls><｜DSML｜invoke id=\"x\"></｜DSML｜invoke>"
         "</｜DSML｜tool_calls>",
         true},
        {"bad_attributes",
         "</think><｜DSML｜tool_calls><｜DSML｜invoke name=bash></｜DSML｜invoke>"
         "</｜DSML｜tool_calls>",
         true},
        {"tag_name_run_on",
         "</think><｜DSML｜tool_calls><｜DSML｜invokes name=\"a\"></｜DSML｜invoke>"
         "</｜DSML｜tool_calls>",
         true},
        {"mixed_variant_closers",
         "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</invoke>\n</tool_calls>", false},
        {"bad_json_parameter",
         "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"
         "<｜DSML｜parameter name=\"x\" string=\"false\">{not json</｜DSML｜parameter>"
         "</｜DSML｜invoke></｜DSML｜tool_calls>",
         true},
        {"text_between_params",
         "</think><｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">stray"
         "<｜DSML｜parameter name=\"x\" string=\"true\">1</｜DSML｜parameter>"
         "</｜DSML｜invoke></｜DSML｜tool_calls>",
         true},
    };
    return list;
}

}  // namespace magnetar::chat::fixtures
