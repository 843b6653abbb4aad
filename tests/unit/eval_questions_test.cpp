// `magnetar eval` question sets (tools/eval/questions.h): parsing with errors that name the line
// and field, the prompt of each kind, and the grading of every answer kind, on an "Answer:"
// line and in free text.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "eval/questions.h"

namespace magnetar::eval {
namespace {

// One question written over several source lines (joined: JSONL is one object per line).
question one(std::string line) {
    for (char& c : line)
        if (c == '\n') c = ' ';
    const std::vector<question> qs = parse_questions(line, "t.jsonl");
    EXPECT_EQ(qs.size(), 1u);
    return qs.at(0);
}

std::string parse_error(const std::string& text) {
    try {
        (void)parse_questions(text, "t.jsonl");
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(EvalQuestions, ParsesEveryKind) {
    const std::vector<question> qs = parse_questions(
        R"({"id": "a", "kind": "choice", "question": "Q?", "choices": ["x", "y", "z"], "answer": "c"}

{"id": "b", "kind": "integer", "question": "N?", "answer": 1675, "source": "ignored"}
{"id": "c", "kind": "integer", "question": "N?", "answer": "1,675"}
{"id": "d", "kind": "exact", "question": "S?", "answer": "Danuda", "aliases": ["the Danuda"]}
{"id": "e", "kind": "lines", "question": "L?", "answer": [[3, 4], [9], 12]}
{"id": "f", "kind": "lines", "question": "L?", "answer": [], "prompt": "Own words?"}
)",
        "t.jsonl");
    ASSERT_EQ(qs.size(), 6u);
    EXPECT_EQ(qs[0].kind, answer_kind::choice);
    EXPECT_EQ(qs[0].letter, 'C');
    EXPECT_EQ(qs[0].source, "t.jsonl:1");
    EXPECT_EQ(qs[1].integer, 1675);
    EXPECT_EQ(qs[1].source, "t.jsonl:3");  // blank lines count
    EXPECT_EQ(qs[2].integer, 1675);
    EXPECT_EQ(qs[3].strings, (std::vector<std::string>{"Danuda", "the Danuda"}));
    ASSERT_EQ(qs[4].groups.size(), 3u);
    EXPECT_EQ(qs[4].groups[0], (std::pair<int64_t, int64_t>{3, 4}));
    EXPECT_EQ(qs[4].groups[2], (std::pair<int64_t, int64_t>{12, 12}));
    EXPECT_TRUE(qs[5].groups.empty());
    EXPECT_EQ(expected_text(qs[4]), "lines 3-4, 9 and 12");
    EXPECT_EQ(expected_text(qs[5]), "0 (none)");
    EXPECT_EQ(prompt_text(qs[5]), "Own words?");
    const std::string p = prompt_text(qs[0]);
    EXPECT_NE(p.find("Q?\n\nA) x\nB) y\nC) z\n\nEnd your reply with one line \"Answer: X\""),
              std::string::npos)
        << p;
}

TEST(EvalQuestions, ErrorsNameTheLineAndTheField) {
    EXPECT_EQ(
        parse_error("{\"id\": \"a\", \"kind\": \"essay\", \"question\": \"q\", \"answer\": 1}"),
        "t.jsonl:1: unknown kind \"essay\" (choice, integer, exact or lines)");
    EXPECT_EQ(parse_error("\n{\"kind\": \"exact\", \"question\": \"q\", \"answer\": \"x\"}"),
              "t.jsonl:2: missing \"id\"");
    EXPECT_EQ(parse_error("{\"id\": \"a\", \"kind\": \"exact\", \"question\": \"q\"}"),
              "t.jsonl:1: missing \"answer\"");
    EXPECT_EQ(parse_error("{\"id\": \"a\", \"kind\": \"choice\", \"question\": \"q\", "
                          "\"choices\": [\"x\", \"y\"], \"answer\": \"D\"}"),
              "t.jsonl:1: answer \"D\" is not one of the 2 choices");
    EXPECT_EQ(parse_error("{\"id\": \"a\", \"kind\": \"integer\", \"question\": \"q\", "
                          "\"answer\": \"many\"}"),
              "t.jsonl:1: \"answer\" must be an integer");
    EXPECT_EQ(parse_error("{\"id\": \"a\", \"kind\": \"lines\", \"question\": \"q\", "
                          "\"answer\": [[5, 2]]}"),
              "t.jsonl:1: line groups need 1 <= lo <= hi (an empty list means none)");
    const std::string dup =
        "{\"id\": \"a\", \"kind\": \"exact\", \"question\": \"q\", \"answer\": \"x\"}\n"
        "{\"id\": \"a\", \"kind\": \"exact\", \"question\": \"q\", \"answer\": \"y\"}\n";
    EXPECT_EQ(parse_error(dup), "t.jsonl:2: duplicate id \"a\"");
    EXPECT_NE(parse_error("{not json").find("t.jsonl:1: not JSON"), std::string::npos);
    EXPECT_EQ(parse_error("\n\n"), "t.jsonl: no questions (one JSON object per line)");
}

TEST(EvalQuestions, IntegersInText) {
    EXPECT_EQ(first_integer("about 1,675 light years"), 1675);
    EXPECT_EQ(first_integer("It has two moons."), 2);
    EXPECT_EQ(first_integer("Twelve of them"), 12);
    EXPECT_EQ(first_integer("-42 degrees"), -42);
    EXPECT_EQ(first_integer("the 3rd, then 7"), 7);  // "3rd" is not a number
    EXPECT_EQ(first_integer("none at all"), std::nullopt);
    EXPECT_EQ(first_integer("1,2,3"), 1);  // commas without three digits separate numbers
    EXPECT_EQ(all_integers("lines 3, 4 and 12"), (std::vector<int64_t>{3, 4, 12}));
    EXPECT_EQ(all_integers("someone ten"), (std::vector<int64_t>{10}));  // "one" inside a word
}

TEST(EvalQuestions, GradesChoices) {
    const question q = one(R"({"id": "a", "kind": "choice", "question": "Which colour?",
        "choices": ["red", "blue-white", "yellow", "orange"], "answer": "B"})");
    grade g = grade_reply(q, "<think>A or B? A is wrong.</think>It is blue-white.\nAnswer: (B)");
    EXPECT_TRUE(g.pass);
    EXPECT_TRUE(g.answer_line);
    EXPECT_EQ(g.answer, "B");
    EXPECT_FALSE(grade_reply(q, "Answer: A) red").pass);
    EXPECT_FALSE(grade_reply(q, "Answer: E").pass);  // not a choice
    // The thinking block is not graded, the last Answer line is.
    EXPECT_TRUE(grade_reply(q, "<think>Answer: A</think>Answer: A\nAnswer: B").pass);
    // Free text: a marker, or the one option named.
    g = grade_reply(q, "A star like that is blue-white.");
    EXPECT_TRUE(g.pass);
    EXPECT_FALSE(g.answer_line);
    EXPECT_TRUE(grade_reply(q, "I pick B) here").pass);
    EXPECT_FALSE(grade_reply(q, "Either red or blue-white.").pass);  // names two
}

TEST(EvalQuestions, GradesIntegers) {
    const question q =
        one(R"({"id": "a", "kind": "integer", "question": "How far?", "answer": 1399})");
    EXPECT_TRUE(grade_reply(q, "Answer: 1,399 light years").pass);
    EXPECT_TRUE(grade_reply(q, "The star lies about 1,399 light years away.").pass);
    EXPECT_FALSE(grade_reply(q, "Answer: 1400").pass);
    EXPECT_FALSE(grade_reply(q, "No idea.").pass);
    const question moons =
        one(R"({"id": "m", "kind": "integer", "question": "Moons?", "answer": 2})");
    EXPECT_TRUE(grade_reply(moons, "Tewacel b has two moons.").pass);
    EXPECT_EQ(grade_reply(moons, "It has three.").answer, "3");
}

TEST(EvalQuestions, GradesExactStrings) {
    const question q = one(R"({"id": "a", "kind": "exact", "question": "Where?",
        "answer": "Danuda", "aliases": ["the constellation Danuda"]})");
    EXPECT_TRUE(grade_reply(q, "Answer: danuda.").pass);
    EXPECT_TRUE(grade_reply(q, "Answer: **The  constellation Danuda**").pass);
    EXPECT_FALSE(grade_reply(q, "Answer: Danuda Major").pass);  // the answer line must be equal
    EXPECT_TRUE(grade_reply(q, "The star belongs to the constellation Danuda.").pass);
    EXPECT_FALSE(grade_reply(q, "It lies in Danudas.").pass);  // whole words only
}

TEST(EvalQuestions, GradesLineSets) {
    const question q = one(R"({"id": "a", "kind": "lines", "question": "Which?",
        "answer": [[3, 4], [9]]})");
    EXPECT_TRUE(grade_reply(q, "Answer: 3, 9").pass);
    EXPECT_TRUE(grade_reply(q, "Answer: 4, 3, 9").pass);    // several lines of one group
    EXPECT_FALSE(grade_reply(q, "Answer: 3").pass);         // group 9 missing
    EXPECT_FALSE(grade_reply(q, "Answer: 3, 9, 10").pass);  // 10 outside every group
    EXPECT_FALSE(grade_reply(q, "Answer: none").pass);
    const question none =
        one(R"({"id": "n", "kind": "lines", "question": "Which?", "answer": []})");
    EXPECT_TRUE(grade_reply(none, "Answer: 0").pass);
    EXPECT_FALSE(grade_reply(none, "Answer: 5").pass);
    EXPECT_FALSE(grade_reply(none, "Answer:").pass);
}

}  // namespace
}  // namespace magnetar::eval
