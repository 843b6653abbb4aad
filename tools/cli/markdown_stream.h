// Markdown of a streamed reply shown with terminal attributes, piece by piece as the model
// writes it: **bold** and `code` lose their markers and show bold / cyan, "# heading" lines
// show bold without the hashes, "- " and "* " list items start with a bullet, and ``` fenced
// blocks show cyan with their fence lines dim (no markup inside them). A marker that may still
// become one (a "*" before the next character, the start of a line) is held until it is
// decided, so the output only ever appends. Without colour the text passes unchanged.
//
// Owns: that rendering. Does not own: where the text goes (cmd_agent.cpp).
#pragma once

#include <string>
#include <string_view>

namespace magnetar::cli {

class markdown_stream {
  public:
    explicit markdown_stream(bool colour) : colour_(colour) {}

    // The terminal text for the next piece of the reply.
    std::string feed(std::string_view piece);
    // What is still held, with every attribute reset; the next feed starts a new reply.
    std::string finish();

  private:
    void put(char c, std::string* out);
    void inline_char(char c, std::string* out);
    void decide_head(std::string* out, bool line_end);
    void end_line(std::string* out);

    bool colour_;
    bool line_start_ = true;
    std::string head_;  // the start of a line, held until its kind is known
    bool fence_ = false;
    bool fence_line_ = false;  // the rest of a ``` line (its language tag), dim
    bool heading_ = false;
    bool bold_ = false;
    bool code_ = false;
    bool star_ = false;  // one '*' held
};

}  // namespace magnetar::cli
