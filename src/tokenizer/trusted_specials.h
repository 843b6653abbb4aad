// The one guard against control-token injection: a rendered prompt is tokenized with control
// tokens only where the template put them.
//
// A rendered chat prompt is template text (BOS, role markers, thinking markers, DSML syntax)
// around client text (chat::render_options::client_spans). Tokenizing it as rendered chat would
// turn a special literal that a user typed into a control token. Here the special literals that
// lie wholly outside the client spans are the trusted ones (specials_outside); encode_trusted
// emits exactly those as control tokens and tokenizes everything between them as plain text.
// Without special literals in client text the tokens equal the official encoder's.
//
// Used by Engine::tokenize_chat and by the server's prompt builder and cache-reuse check
// (tools/server/prompt.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace magnetar {

class tokenizer;

// A control-token literal found at `offset` in a rendered prompt.
struct trusted_special {
    size_t offset = 0;
    size_t len = 0;
    int32_t id = -1;
};

// The special-token literals of a vocabulary, for leftmost-longest matching.
class special_literals {
  public:
    explicit special_literals(const tokenizer& tok);

    // The longest special literal starting at s[pos]: {id, length} or {-1, 0}.
    std::pair<int32_t, size_t> match(std::string_view s, size_t pos) const;
    // Every special literal of `text`, leftmost-longest, ascending.
    std::vector<trusted_special> find(std::string_view text) const;

  private:
    // Literals grouped by first byte, longest first.
    std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_;
};

// The special literals of `text` that lie wholly outside the client spans (ascending, not
// overlapping): the template's own control literals. A literal inside, or overlapping, client
// text is plain text. Throws magnetar::Error when the spans are out of order or out of range.
std::vector<trusted_special> specials_outside(
    const special_literals& lits, std::string_view text,
    const std::vector<std::pair<size_t, size_t>>& client_spans);

// Tokenizes text[from:] with the trusted specials at or after `from` as control tokens and
// everything else as plain text; appends to `out`.
void encode_trusted(const tokenizer& tok, std::string_view text,
                    const std::vector<trusted_special>& specials, size_t from,
                    std::vector<int32_t>& out);

}  // namespace magnetar
