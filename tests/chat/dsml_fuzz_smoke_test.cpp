// A short deterministic run of the DSML fuzz body (tests/fuzz/dsml_fuzz.cpp) inside the test
// suite, so the parser contracts are exercised on every build, with or without clang: the
// fixtures mutated by byte flips, marker splices, duplications and truncations.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "dsml_check.h"
#include "dsml_fixtures.h"

namespace magnetar::chat {
namespace {

const char* const kSplices[] = {
    "<｜DSML｜tool_calls>",
    "</｜DSML｜tool_calls>",
    "<｜DSML｜invoke name=\"x\">",
    "</｜DSML｜invoke>",
    "<｜DSML｜parameter name=\"k\" string=\"true\">",
    "<｜DSML｜parameter name=\"j\" string=\"false\">",
    "<｜DSML｜parameter name=\"n\">",
    "</｜DSML｜parameter>",
    "</think>",
    "<think>",
    "&amp;",
    "&lt",
    "\n\n",
    "\xe6\xbc",
    "｜",
    "<tool_calls>",
    "<DSML｜invoke name=\"y\">",
    "\"",
    ">",
    "<",
};

std::string mutate(std::string s, std::mt19937& rng) {
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
        size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
        switch (rng() % 5) {
            case 0:
                if (!s.empty() && pos < s.size()) s[pos] = static_cast<char>(rng());
                break;
            case 1:
                s.insert(pos, kSplices[rng() % (sizeof(kSplices) / sizeof(kSplices[0]))]);
                break;
            case 2:
                s.erase(pos, rng() % 16);
                break;
            case 3:
                s.resize(pos);
                break;
            case 4: {
                size_t len = rng() % 40;
                if (pos + len <= s.size()) s.insert(pos, s.substr(pos, len));
                break;
            }
        }
    }
    return s;
}

TEST(DsmlFuzzSmoke, MutatedFixturesKeepEveryContract) {
    std::mt19937 rng(20240601);
    const auto& all = fixtures::all();
    for (int iter = 0; iter < 1500; ++iter) {
        const auto& f = all[rng() % all.size()];
        std::string input(1, static_cast<char>((rng() & 0xFE) | (f.thinking ? 1 : 0)));
        input += mutate(f.text, rng);
        std::string err =
            check::fuzz_one(reinterpret_cast<const uint8_t*>(input.data()), input.size());
        ASSERT_EQ(err, "") << "iteration " << iter << " from " << f.name << ": "
                           << ::testing::PrintToString(input);
    }
}

TEST(DsmlFuzzSmoke, FixturesAsFuzzInputs) {
    for (const auto& f : fixtures::all()) {
        std::string input(1, f.thinking ? '\x01' : '\x00');
        input += f.text;
        EXPECT_EQ(check::fuzz_one(reinterpret_cast<const uint8_t*>(input.data()), input.size()), "")
            << f.name;
    }
}

}  // namespace
}  // namespace magnetar::chat
