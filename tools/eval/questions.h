// Question sets of `magnetar eval` (docs/eval.md): the JSONL format, reading the answer out of
// a reply, and grading it.
//
// One question per line:
//   {"id": "dist-3", "kind": "integer", "question": "How far away is the star Tokrar?",
//    "answer": 24}
//   {"id": "kind-1", "kind": "choice", "question": "...", "choices": ["...", "..."],
//    "answer": "B"}
//   {"id": "const-2", "kind": "exact", "question": "...", "answer": "Danuda",
//    "aliases": ["the constellation Danuda"]}
//   {"id": "lines-1", "kind": "lines", "question": "...", "answer": [[3, 4], [9]]}
// An optional "prompt" is the user turn verbatim (no lettered choices, no instruction added):
// for models that answer best in their own phrasing.
// Kinds: `choice` (a letter; `choices` are listed under the question as "A) ..."), `integer`
// (digits with optional thousands commas, or an English number word up to twenty), `exact` (the
// string, case and spacing aside; `aliases` also pass), `lines` (line numbers: each accepted
// group [lo, hi] (or [n]) must be named by at least one line inside it and no line may fall
// outside every group; an empty list means "none", answered as 0).
//
// The answer is the text after the last "Answer:" of the visible reply (after the thinking),
// up to the end of its line. A reply without one is graded on its whole visible text: the
// first choice letter or integer in it, an exact string occurring in it as a whole phrase, the
// line numbers in it.
//
// Owns: parsing and checking a question file (errors name the file, line and field), the prompt
// text of a question, answer extraction and grading. Does not own: running the model, the
// terminal UI or the report (tools/cli/cmd_eval.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace magnetar::eval {

enum class answer_kind { choice, integer, exact, lines };
const char* kind_name(answer_kind k);

struct question {
    std::string id;
    answer_kind kind = answer_kind::exact;
    std::string text;                  // the question as written in the file
    std::string prompt;                // the user turn verbatim when the file gives one
    std::vector<std::string> choices;  // choice: the options, lettered A, B, ... in the prompt
    char letter = 0;                   // choice: the right letter
    int64_t integer = 0;               // integer
    std::vector<std::string> strings;  // exact: the answer, then the aliases
    std::vector<std::pair<int64_t, int64_t>> groups;  // lines: accepted ranges (empty: none)
    std::string source;                               // "FILE:LINE", for messages
};

// Reads one JSONL file; blank lines are skipped. Throws std::runtime_error naming the file,
// the line and the field on anything malformed (unknown kind, missing or mistyped field, a
// letter outside the choices, duplicate ids within the file, ...).
std::vector<question> read_questions(const std::string& path);
// The same from text (`name` stands for the file in messages).
std::vector<question> parse_questions(const std::string& text, const std::string& name);

// The user turn of a question: its "prompt" when given, else its text, the lettered choices,
// and the instruction to end with an "Answer:" line in the kind's form.
std::string prompt_text(const question& q);

// The expected answer in words ("B", "24", "Danuda", "lines 3-4 and 9", "0 (none)").
std::string expected_text(const question& q);

struct grade {
    bool pass = false;
    bool answer_line = false;  // graded on an "Answer:" line (else on the whole visible reply)
    std::string answer;        // what was read as the model's answer ("" when nothing)
};

// The visible reply: the text after the last </think> (all of it when there is none).
std::string visible_reply(const std::string& reply);

// Grades `reply` (the generated text, thinking included) against q.
grade grade_reply(const question& q, const std::string& reply);

// Parsing helpers, exposed for the tests: the first integer in `text` (digits with thousands
// commas, or a number word), and every integer in it.
std::optional<int64_t> first_integer(const std::string& text);
std::vector<int64_t> all_integers(const std::string& text);

}  // namespace magnetar::eval
