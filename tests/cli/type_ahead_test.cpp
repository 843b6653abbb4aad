// Keys typed while the agent works (tools/cli/type_ahead.h): queueing, pulling back, sending
// now, editing, escape sequences cut between reads, and the footer's width.
#include "cli/type_ahead.h"

#include <gtest/gtest.h>

#include <string>

namespace magnetar::cli {
namespace {

using action = type_ahead::action;

TEST(TypeAhead, EnterQueuesInOrderAndUpPullsTheLatestBack) {
    type_ahead t;
    EXPECT_EQ(t.feed("first\r"), action::changed);
    EXPECT_EQ(t.feed("second\r"), action::changed);
    EXPECT_EQ(t.feed("\r"), action::none) << "an empty draft is not queued";
    ASSERT_EQ(t.queue().size(), 2u);
    EXPECT_EQ(t.feed("\x1b[A"), action::changed);
    EXPECT_EQ(t.draft(), "second");
    EXPECT_EQ(t.feed("\x1b[A"), action::none) << "only into an empty draft";
    EXPECT_EQ(t.feed("!\r"), action::changed);
    EXPECT_EQ(t.pop(), "first");
    EXPECT_EQ(t.pop(), "second!");
    EXPECT_EQ(t.pop(), std::nullopt);
}

TEST(TypeAhead, TabSendsTheDraftOrTheFirstQueuedNow) {
    type_ahead t;
    EXPECT_EQ(t.feed("\t"), action::none) << "nothing to send";
    t.feed("later\rnow");
    EXPECT_EQ(t.feed("\t"), action::send_now);
    EXPECT_EQ(t.draft(), "");
    EXPECT_EQ(t.pop(), "now");
    EXPECT_EQ(t.feed("\t"), action::send_now);
    EXPECT_EQ(t.pop(), "later");
}

TEST(TypeAhead, EditingKeysContinuationAndIgnoredInput) {
    type_ahead t;
    t.feed("ab\xc3\xa9");  // "abé"
    EXPECT_EQ(t.feed("\x7f"), action::changed);
    EXPECT_EQ(t.draft(), "ab") << "Backspace removes a whole code point";
    t.feed("\x15");
    EXPECT_EQ(t.draft(), "");
    t.feed("line one\\\rline two");
    EXPECT_EQ(t.draft(), "line one\nline two");
    // Control keys and other escape sequences, also cut between reads, change nothing.
    EXPECT_EQ(t.feed("\x04\x01\x1b["), action::none);
    EXPECT_EQ(t.feed("1;5C\x1bOP\x1b[B"), action::none);
    EXPECT_EQ(t.draft(), "line one\nline two");
    EXPECT_EQ(t.take_draft(), "line one\nline two");
    EXPECT_EQ(t.draft(), "");
}

TEST(TypeAhead, FooterFitsTheWidthAndKeepsTheDraftsEnd) {
    type_ahead t;
    const std::string idle = footer_text("generating 41.0 t/s", 1500, 4096, t, 120);
    EXPECT_EQ(idle.rfind("[generating 41.0 t/s | context 1500/4096 (37%)] ", 0), 0u) << idle;
    EXPECT_NE(idle.find("Enter queues"), std::string::npos) << idle;
    t.feed("one\rtwo\r");
    t.feed(std::string(200, 'x') + "END");
    const std::string f = footer_text("prefill", 10, 100, t, 80);
    EXPECT_NE(f.find("| 2 queued]"), std::string::npos) << f;
    EXPECT_EQ(f.size(), 79u) << f;
    EXPECT_EQ(f.substr(f.size() - 3), "END");
    EXPECT_EQ(footer_text("generating", 1, 2, t, 10).size(), 10u);
}

}  // namespace
}  // namespace magnetar::cli
