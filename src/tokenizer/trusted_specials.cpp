#include "tokenizer/trusted_specials.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace magnetar {

special_literals::special_literals(const tokenizer& tok) {
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (!tok.is_special(id)) continue;
        std::string lit(tok.token_bytes(id));
        if (lit.empty()) continue;
        by_first_[static_cast<unsigned char>(lit[0])].emplace_back(std::move(lit), id);
    }
    for (auto& v : by_first_) {
        std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
            return a.first.size() > b.first.size();
        });
    }
}

std::pair<int32_t, size_t> special_literals::match(std::string_view s, size_t pos) const {
    const auto& cands = by_first_[static_cast<unsigned char>(s[pos])];
    const std::string_view rest = s.substr(pos);
    for (const auto& [lit, id] : cands) {
        if (rest.size() >= lit.size() && rest.compare(0, lit.size(), lit) == 0) {
            return {id, lit.size()};
        }
    }
    return {-1, 0};
}

std::vector<trusted_special> special_literals::find(std::string_view text) const {
    std::vector<trusted_special> out;
    for (size_t i = 0; i < text.size();) {
        if (by_first_[static_cast<unsigned char>(text[i])].empty()) {
            ++i;
            continue;
        }
        const auto [id, len] = match(text, i);
        if (id < 0) {
            ++i;
            continue;
        }
        out.push_back({i, len, id});
        i += len;
    }
    return out;
}

void encode_trusted(const tokenizer& tok, std::string_view text,
                    const std::vector<trusted_special>& specials, size_t from,
                    std::vector<int32_t>& out) {
    size_t pos = from;
    auto it = std::lower_bound(specials.begin(), specials.end(), from,
                               [](const trusted_special& s, size_t off) { return s.offset < off; });
    for (; it != specials.end(); ++it) {
        if (it->offset < pos || it->offset + it->len > text.size()) continue;
        if (it->offset > pos) tok.encode_append(text.substr(pos, it->offset - pos), false, out);
        out.push_back(it->id);
        pos = it->offset + it->len;
    }
    if (pos < text.size()) tok.encode_append(text.substr(pos), false, out);
}

// The special literals of `text` that lie wholly outside the client spans: the template's own
// control literals. A literal inside, or overlapping, client text is plain text.
std::vector<trusted_special> specials_outside(
    const special_literals& lits, std::string_view text,
    const std::vector<std::pair<size_t, size_t>>& client_spans) {
    std::vector<trusted_special> out;
    size_t from = 0;
    auto scan = [&](size_t end) {
        if (end <= from) return;
        for (trusted_special s : lits.find(text.substr(from, end - from))) {
            s.offset += from;
            out.push_back(s);
        }
    };
    for (const auto& [b, e] : client_spans) {
        if (b < from || e > text.size() || b > e) {
            throw Error("prompt: client spans out of order or out of range (never expected)");
        }
        scan(b);
        from = e;
    }
    scan(text.size());
    return out;
}

}  // namespace magnetar
