// The agent's streamed markdown (tools/cli/markdown_stream.h): each construct, text that only
// looks like markup, and the same output however the reply is cut into pieces.
#include "cli/markdown_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace magnetar::cli {
namespace {

std::string render(const std::string& text) {
    markdown_stream md(true);
    std::string out = md.feed(text);
    return out + md.finish();
}

TEST(MarkdownStream, WithoutColourTheTextIsUnchanged) {
    markdown_stream md(false);
    const std::string t = "# Title\n**bold** `code`\n- item\n```\nx\n```\n";
    const std::string out = md.feed(t);
    EXPECT_EQ(out + md.finish(), t);
}

TEST(MarkdownStream, InlineBoldAndCodeLoseTheirMarkers) {
    EXPECT_EQ(render("a **bold** and `code` word"),
              "a \x1b[1mbold\x1b[22m and \x1b[36mcode\x1b[39m word");
    // No bold inside code; a lone star is text.
    EXPECT_EQ(render("`**x**` 3 * 4 = 12"), "\x1b[36m**x**\x1b[39m 3 * 4 = 12");
    // An unclosed span ends with its line.
    EXPECT_EQ(render("**open\nnext"), "\x1b[1mopen\x1b[22m\nnext");
}

TEST(MarkdownStream, HeadingsBulletsAndFences) {
    EXPECT_EQ(render("## Plan\nbody\n"), "\x1b[1mPlan\x1b[22m\nbody\n");
    EXPECT_EQ(render("#hashtag\n####### seven\n"), "#hashtag\n####### seven\n");
    EXPECT_EQ(render("- one\n  * two\n-x\n"), "\xe2\x80\xa2 one\n  \xe2\x80\xa2 two\n-x\n");
    EXPECT_EQ(render("```cpp\nint **p;\n```\nafter"),
              "\x1b[2m```cpp\x1b[22m\n\x1b[36mint **p;\n\x1b[39m\x1b[2m```\x1b[22m\nafter");
}

TEST(MarkdownStream, WhatIsHeldAtTheEndIsShownAndAttributesReset) {
    EXPECT_EQ(render("a *"), "a *");
    EXPECT_EQ(render("#"), "#");
    EXPECT_EQ(render("**bold"), "\x1b[1mbold\x1b[0m");
    EXPECT_EQ(render("```\ncode"), "\x1b[2m```\x1b[22m\n\x1b[36mcode\x1b[0m");
}

TEST(MarkdownStream, PiecesDoNotChangeTheOutput) {
    const std::string t =
        "# Files\nThe **notes** folder has `todo.txt`:\n- **a** item\n* b\n```sh\nls -l **\n"
        "```\n3 * 4 and ** then `x`\n## End";
    const std::string whole = render(t);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        markdown_stream md(true);
        std::string out;
        for (size_t at = 0; at < t.size();) {
            const size_t n = std::min<size_t>(t.size() - at, 1 + rng() % 5);
            out += md.feed(std::string_view(t).substr(at, n));
            at += n;
        }
        out += md.finish();
        ASSERT_EQ(out, whole) << "trial " << trial;
    }
}

}  // namespace
}  // namespace magnetar::cli
