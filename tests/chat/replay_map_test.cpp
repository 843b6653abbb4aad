// Exact-replay memory: remembering and attaching sampled blocks, LRU order, entry and byte
// limits, deduplicated blocks, and the end-to-end path parse -> remember -> attach -> render.
#include "chat/replay_map.h"

#include <gtest/gtest.h>

#include <string>

#include "chat/dsml.h"
#include "chat/renderer.h"
#include "chat/tool_id.h"

namespace magnetar::chat {
namespace {

message assistant_with(std::vector<std::string> ids) {
    message m;
    m.role = role::assistant;
    for (auto& id : ids) m.tool_calls.push_back({id, "f", "{}"});
    return m;
}

TEST(ReplayMap, AttachNeedsAllIdsOnOneBlock) {
    replay_map map;
    map.remember({"call_a", "call_b"}, "BLOCK1");
    map.remember({"call_c"}, "BLOCK2", replay_source::disk);

    message m = assistant_with({"call_a", "call_b"});
    EXPECT_EQ(map.attach(&m), replay_outcome::replayed_ram);
    EXPECT_EQ(m.raw_dsml, "BLOCK1");

    message d = assistant_with({"call_c"});
    EXPECT_EQ(map.attach(&d), replay_outcome::replayed_disk);
    EXPECT_EQ(d.raw_dsml, "BLOCK2");

    message mixed = assistant_with({"call_a", "call_c"});
    mixed.raw_dsml = "stale";
    EXPECT_EQ(map.attach(&mixed), replay_outcome::canonical);
    EXPECT_FALSE(mixed.raw_dsml.has_value());

    message partial = assistant_with({"call_a", "call_zzz"});
    EXPECT_EQ(map.attach(&partial), replay_outcome::missing);
    EXPECT_FALSE(partial.raw_dsml.has_value());

    message none;
    none.role = role::assistant;
    EXPECT_EQ(map.attach(&none), replay_outcome::no_calls);
    EXPECT_STREQ(replay_outcome_name(replay_outcome::missing), "missing");
}

TEST(ReplayMap, BlocksAreDeduplicatedAndCharged) {
    replay_map map;
    std::string block(1000, 'x');
    map.remember({"a", "b"}, block);
    map.remember({"c"}, block);
    EXPECT_EQ(map.size(), 3u);
    EXPECT_EQ(map.bytes(),
              1000 + replay_map::kBlockOverhead + 3 * (1 + replay_map::kEntryOverhead));
    EXPECT_EQ(map.lookup("a").get(), map.lookup("c").get());  // one stored copy
    map.erase("a");
    map.erase("b");
    map.erase("c");
    EXPECT_EQ(map.size(), 0u);
    EXPECT_EQ(map.bytes(), 0u);
}

TEST(ReplayMap, LeastRecentlyUsedIsEvictedFirst) {
    replay_map map(replay_limits{3, size_t{1} << 20});
    map.remember({"1"}, "B1");
    map.remember({"2"}, "B2");
    map.remember({"3"}, "B3");
    ASSERT_NE(map.lookup("1"), nullptr);  // touch: "2" is now the oldest
    map.remember({"4"}, "B4");
    EXPECT_EQ(map.size(), 3u);
    EXPECT_FALSE(map.contains("2"));
    EXPECT_TRUE(map.contains("1"));
    auto entries = map.entries();
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_EQ(entries[0].id, "4");
    EXPECT_EQ(entries[1].id, "1");
    EXPECT_EQ(entries[2].id, "3");
    EXPECT_EQ(*entries[0].block, "B4");
}

TEST(ReplayMap, ByteLimitEvictsAndOversizedBlocksAreNotStored) {
    size_t limit = 3 * (100 + replay_map::kBlockOverhead + 1 + replay_map::kEntryOverhead);
    replay_map map(replay_limits{1000, limit});
    map.remember({"a"}, std::string(100, 'a'));
    map.remember({"b"}, std::string(100, 'b'));
    map.remember({"c"}, std::string(100, 'c'));
    EXPECT_EQ(map.size(), 3u);
    map.remember({"d"}, std::string(100, 'd'));
    EXPECT_EQ(map.size(), 3u);
    EXPECT_FALSE(map.contains("a"));
    EXPECT_LE(map.bytes(), limit);
    map.remember({"huge"}, std::string(limit, 'h'));
    EXPECT_FALSE(map.contains("huge"));
    EXPECT_EQ(map.size(), 3u);
    // Re-remembering an id re-points it.
    map.remember({"b"}, "new");
    EXPECT_EQ(*map.lookup("b"), "new");
    map.clear();
    EXPECT_EQ(map.bytes(), 0u);
}

TEST(ReplayMap, SampledBytesAreReplayedInTheNextRender) {
    // The model wrote a block the canonical writer would spell differently (no string
    // attribute, extra spaces); the next request sends it back as JSON.
    std::string generated =
        "need ls</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
        "<｜DSML｜parameter name=\"command\">ls  -la</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    parse_result r = parse_tool_calls(generated, true);
    ASSERT_EQ(r.status, parse_status::ok);
    replay_map map;
    assign_missing_ids(&r.calls, id_style::openai,
                       [&](std::string_view id) { return map.contains(id); });
    std::vector<std::string> ids;
    for (const auto& c : r.calls) ids.push_back(c.id);
    map.remember(ids, r.raw_dsml);

    message user;
    user.role = role::user;
    user.content = "list";
    message a;
    a.role = role::assistant;
    a.reasoning_content = *r.reasoning;
    a.tool_calls.push_back({ids[0], "bash", R"({"command":"ls  -la"})"});
    message t;
    t.role = role::tool;
    t.content = "a.c";
    t.tool_call_id = ids[0];

    EXPECT_EQ(map.attach(&a), replay_outcome::replayed_ram);
    render_options o;
    std::string prompt = render_chat({user, a, t}, {}, o);
    EXPECT_NE(prompt.find("<think>need ls</think>" + r.raw_dsml + "<｜end▁of▁sentence｜>"),
              std::string::npos)
        << prompt;
    // Without the memory the canonical form differs from what was sampled.
    EXPECT_NE(render_tool_calls(a.tool_calls), r.raw_dsml);
}

}  // namespace
}  // namespace magnetar::chat
