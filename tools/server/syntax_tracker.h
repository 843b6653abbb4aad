// Greedy-on-syntax classification of a DSML block being generated (protocol §3.5).
//
// Owns: deciding, before each token is sampled, whether the model is writing DSML structure
// (tags, parameter headers, JSON punctuation: sampled greedily) or payload (string parameter
// bodies, JSON string literals: sampled normally), and whether the block has closed (the stop
// condition of §3.4). Works on the visible text only (after </think> in thinking mode), so
// DSML quoted inside reasoning neither gets greedy syntax nor stops the generation.
// Does not own: the streamed projection (chat::dsml_stream) or the authoritative parse.
#pragma once

#include <string>
#include <string_view>

namespace magnetar::server {

enum class syntax_state {
    outside,          // no tool block opened yet: normal sampling
    structural,       // between or inside tags: greedy
    string_body,      // inside a string="true" value: normal
    json_structural,  // inside a string="false" value, outside JSON strings: greedy
    json_string,      // inside a JSON string literal of a string="false" value: normal
    done,             // the closing tool_calls tag was written: generation stops
};

const char* syntax_state_name(syntax_state s);

inline bool syntax_is_greedy(syntax_state s) {
    return s == syntax_state::structural || s == syntax_state::json_structural;
}

// Classifies the end of `visible` (the whole visible text generated so far). Incremental in
// where the block starts; the block itself is re-scanned (blocks are small).
class syntax_tracker {
  public:
    syntax_state update(std::string_view visible);

  private:
    size_t block_start_ = std::string::npos;  // offset of the opening tag
    size_t search_from_ = 0;
    std::string_view infix_;
};

}  // namespace magnetar::server
