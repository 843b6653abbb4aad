#include "eval/questions.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

namespace magnetar::eval {

namespace {

using json = nlohmann::json;

constexpr const char* kNumberWords[] = {
    "zero",     "one",     "two",     "three",     "four",     "five",     "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};

bool is_alpha(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_alnum(char c) {
    return is_alpha(c) || is_digit(c);
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Lowercase, spacing collapsed, surrounding punctuation, quotes and markdown emphasis removed.
std::string normalise(const std::string& s) {
    std::string out;
    bool space = false;
    for (char c : lower(s)) {
        if (std::isspace(static_cast<unsigned char>(c))) {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += c;
    }
    const std::string trim = " .,;:!?\"'`()[]*_";
    const size_t b = out.find_first_not_of(trim);
    if (b == std::string::npos) return "";
    const size_t e = out.find_last_not_of(trim);
    return out.substr(b, e - b + 1);
}

// Whole-phrase occurrence of `needle` in `hay` (both normalised): not inside a longer word.
bool contains_phrase(const std::string& hay, const std::string& needle) {
    if (needle.empty()) return false;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) {
        const bool start = at == 0 || !is_alnum(hay[at - 1]);
        const bool end = at + needle.size() >= hay.size() || !is_alnum(hay[at + needle.size()]);
        if (start && end) return true;
    }
    return false;
}

// Every integer of `text` in order: digit runs (thousands commas allowed, a minus sign right
// before), or number words.
std::vector<int64_t> scan_integers(const std::string& text, bool first_only) {
    std::vector<int64_t> out;
    size_t i = 0;
    while (i < text.size() && !(first_only && !out.empty())) {
        const char c = text[i];
        if (is_digit(c) && (i == 0 || !is_alpha(text[i - 1]))) {
            const bool neg = i > 0 && text[i - 1] == '-' && (i < 2 || !is_alnum(text[i - 2]));
            int64_t v = 0;
            size_t j = i;
            bool overflow = false;
            while (j < text.size()) {
                if (is_digit(text[j])) {
                    if (v > (INT64_MAX - 9) / 10) overflow = true;
                    v = overflow ? v : v * 10 + (text[j] - '0');
                    ++j;
                } else if (text[j] == ',' && j + 3 < text.size() && is_digit(text[j + 1]) &&
                           is_digit(text[j + 2]) && is_digit(text[j + 3]) &&
                           (j + 4 >= text.size() || !is_digit(text[j + 4]))) {
                    ++j;  // a thousands separator: exactly three digits follow
                } else {
                    break;
                }
            }
            if (j < text.size() && is_alpha(text[j])) {  // "3rd", "x2y": not a number
                while (j < text.size() && is_alnum(text[j])) ++j;
            } else if (!overflow) {
                out.push_back(neg ? -v : v);
            }
            i = j;
            continue;
        }
        if (is_alpha(c) && (i == 0 || !is_alnum(text[i - 1]))) {
            size_t j = i;
            while (j < text.size() && is_alpha(text[j])) ++j;
            const std::string word = lower(text.substr(i, j - i));
            for (int64_t n = 0; n < static_cast<int64_t>(std::size(kNumberWords)); ++n) {
                if (word == kNumberWords[n]) {
                    out.push_back(n);
                    break;
                }
            }
            i = j;
            continue;
        }
        ++i;
    }
    return out;
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
    throw std::runtime_error(where + ": " + what);
}

std::string str_field(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) bad(where, std::string("missing \"") + key + "\"");
    if (!j[key].is_string()) bad(where, std::string("\"") + key + "\" must be a string");
    return j[key].get<std::string>();
}

int64_t int_value(const json& v, const std::string& where, const char* key) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_string()) {
        const std::vector<int64_t> n = scan_integers(v.get<std::string>(), false);
        if (n.size() == 1) return n[0];
    }
    bad(where, std::string("\"") + key + "\" must be an integer");
}

question parse_one(const json& j, const std::string& where) {
    if (!j.is_object()) bad(where, "not a JSON object");
    question q;
    q.source = where;
    q.id = str_field(j, "id", where);
    if (q.id.empty()) bad(where, "\"id\" is empty");
    q.text = str_field(j, "question", where);
    if (j.contains("prompt")) {
        q.prompt = str_field(j, "prompt", where);
        if (q.prompt.empty()) bad(where, "\"prompt\" is empty");
    }
    const std::string kind = str_field(j, "kind", where);
    if (!j.contains("answer")) bad(where, "missing \"answer\"");
    const json& a = j["answer"];
    if (kind == "choice") {
        q.kind = answer_kind::choice;
        if (!j.contains("choices") || !j["choices"].is_array())
            bad(where, "a choice question needs \"choices\": an array of strings");
        for (const json& c : j["choices"]) {
            if (!c.is_string()) bad(where, "\"choices\" must hold strings");
            q.choices.push_back(c.get<std::string>());
        }
        if (q.choices.size() < 2 || q.choices.size() > 26)
            bad(where, "\"choices\" must hold 2 to 26 options");
        if (!a.is_string() || a.get<std::string>().size() != 1)
            bad(where, "the answer of a choice question is one letter");
        q.letter =
            static_cast<char>(std::toupper(static_cast<unsigned char>(a.get<std::string>()[0])));
        if (q.letter < 'A' || q.letter >= 'A' + static_cast<int>(q.choices.size())) {
            bad(where, std::string("answer \"") + a.get<std::string>() + "\" is not one of the " +
                           std::to_string(q.choices.size()) + " choices");
        }
    } else if (kind == "integer") {
        q.kind = answer_kind::integer;
        q.integer = int_value(a, where, "answer");
    } else if (kind == "exact") {
        q.kind = answer_kind::exact;
        if (!a.is_string() || normalise(a.get<std::string>()).empty())
            bad(where, "the answer of an exact question is a non-empty string");
        q.strings.push_back(a.get<std::string>());
        if (j.contains("aliases")) {
            if (!j["aliases"].is_array()) bad(where, "\"aliases\" must be an array of strings");
            for (const json& s : j["aliases"]) {
                if (!s.is_string() || normalise(s.get<std::string>()).empty())
                    bad(where, "\"aliases\" must hold non-empty strings");
                q.strings.push_back(s.get<std::string>());
            }
        }
    } else if (kind == "lines") {
        q.kind = answer_kind::lines;
        if (!a.is_array())
            bad(where, "the answer of a lines question is an array of [lo, hi] / [n] groups");
        for (const json& g : a) {
            std::pair<int64_t, int64_t> r;
            if (g.is_number_integer()) {
                r = {g.get<int64_t>(), g.get<int64_t>()};
            } else if (g.is_array() && (g.size() == 1 || g.size() == 2)) {
                r.first = int_value(g[0], where, "answer");
                r.second = g.size() == 2 ? int_value(g[1], where, "answer") : r.first;
            } else {
                bad(where, "each line group is a number, [n] or [lo, hi]");
            }
            if (r.first < 1 || r.second < r.first)
                bad(where, "line groups need 1 <= lo <= hi (an empty list means none)");
            q.groups.push_back(r);
        }
    } else {
        bad(where, "unknown kind \"" + kind + "\" (choice, integer, exact or lines)");
    }
    return q;
}

std::string answer_line(const std::string& visible, bool* found) {
    const std::string low = lower(visible);
    const size_t at = low.rfind("answer:");
    *found = at != std::string::npos;
    if (!*found) return visible;
    const size_t b = at + 7;
    const size_t e = visible.find('\n', b);
    std::string line = visible.substr(b, e == std::string::npos ? std::string::npos : e - b);
    const size_t s = line.find_first_not_of(" \t*");
    return s == std::string::npos ? "" : line.substr(s);
}

// The first standalone letter among the choices ("B", "(B)", "B)", "B." ...).
std::optional<char> standalone_letter(const std::string& text, size_t n_choices) {
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c < 'A' || c >= 'A' + static_cast<int>(n_choices)) continue;
        const bool start = i == 0 || !is_alnum(text[i - 1]);
        const bool end = i + 1 >= text.size() || !is_alnum(text[i + 1]);
        if (start && end) return c;
    }
    return std::nullopt;
}

// In free text: an "(X)" / "X)" marker, else the only choice whose text the reply names.
std::optional<char> free_text_choice(const question& q, const std::string& text) {
    for (size_t i = 0; i + 1 < text.size(); ++i) {
        const char c = text[i];
        if (c < 'A' || c >= 'A' + static_cast<int>(q.choices.size())) continue;
        if (text[i + 1] == ')' && (i == 0 || !is_alnum(text[i - 1]))) return c;
    }
    const std::string hay = normalise(text);
    std::optional<char> found;
    for (size_t k = 0; k < q.choices.size(); ++k) {
        if (contains_phrase(hay, normalise(q.choices[k]))) {
            if (found) return std::nullopt;  // names several
            found = static_cast<char>('A' + k);
        }
    }
    return found;
}

}  // namespace

const char* kind_name(answer_kind k) {
    switch (k) {
        case answer_kind::choice:
            return "choice";
        case answer_kind::integer:
            return "integer";
        case answer_kind::exact:
            return "exact";
        case answer_kind::lines:
            return "lines";
    }
    return "?";
}

std::vector<question> parse_questions(const std::string& text, const std::string& name) {
    std::vector<question> out;
    std::set<std::string> ids;
    std::istringstream in(text);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = name + ":" + std::to_string(n);
        json j;
        try {
            j = json::parse(line);
        } catch (const json::exception& e) {
            bad(where, std::string("not JSON (") + e.what() + ")");
        }
        question q = parse_one(j, where);
        if (!ids.insert(q.id).second) bad(where, "duplicate id \"" + q.id + "\"");
        out.push_back(std::move(q));
    }
    if (out.empty()) throw std::runtime_error(name + ": no questions (one JSON object per line)");
    return out;
}

std::vector<question> read_questions(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    std::ostringstream s;
    s << f.rdbuf();
    return parse_questions(s.str(), path);
}

std::string prompt_text(const question& q) {
    if (!q.prompt.empty()) return q.prompt;
    std::string p = q.text;
    switch (q.kind) {
        case answer_kind::choice:
            p += "\n";
            for (size_t k = 0; k < q.choices.size(); ++k)
                p += "\n" + std::string(1, static_cast<char>('A' + k)) + ") " + q.choices[k];
            p += "\n\nEnd your reply with one line \"Answer: X\", where X is the letter of your "
                 "choice.";
            break;
        case answer_kind::integer:
            p += "\n\nEnd your reply with one line \"Answer: N\", where N is an integer.";
            break;
        case answer_kind::exact:
            p += "\n\nEnd your reply with one line \"Answer: \" followed by the answer alone.";
            break;
        case answer_kind::lines:
            p += "\n\nEnd your reply with one line \"Answer: \" followed by the line numbers, "
                 "separated by commas (0 if there are none).";
            break;
    }
    return p;
}

std::string expected_text(const question& q) {
    switch (q.kind) {
        case answer_kind::choice:
            return std::string(1, q.letter);
        case answer_kind::integer:
            return std::to_string(q.integer);
        case answer_kind::exact:
            return q.strings.front();
        case answer_kind::lines: {
            if (q.groups.empty()) return "0 (none)";
            std::string s = "lines ";
            for (size_t k = 0; k < q.groups.size(); ++k) {
                if (k) s += k + 1 == q.groups.size() ? " and " : ", ";
                const auto [lo, hi] = q.groups[k];
                s += lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
            }
            return s;
        }
    }
    return "";
}

std::string visible_reply(const std::string& reply) {
    const size_t at = reply.rfind("</think>");
    return at == std::string::npos ? reply : reply.substr(at + 8);
}

std::optional<int64_t> first_integer(const std::string& text) {
    const std::vector<int64_t> v = scan_integers(text, true);
    if (v.empty()) return std::nullopt;
    return v.front();
}

std::vector<int64_t> all_integers(const std::string& text) {
    return scan_integers(text, false);
}

grade grade_reply(const question& q, const std::string& reply) {
    grade g;
    const std::string visible = visible_reply(reply);
    const std::string text = answer_line(visible, &g.answer_line);
    switch (q.kind) {
        case answer_kind::choice: {
            const std::optional<char> c = g.answer_line ? standalone_letter(text, q.choices.size())
                                                        : free_text_choice(q, text);
            if (c) g.answer = std::string(1, *c);
            g.pass = c && *c == q.letter;
            break;
        }
        case answer_kind::integer: {
            const std::optional<int64_t> v = first_integer(text);
            if (v) g.answer = std::to_string(*v);
            g.pass = v && *v == q.integer;
            break;
        }
        case answer_kind::exact: {
            const std::string got = normalise(text);
            for (const std::string& s : q.strings) {
                const std::string want = normalise(s);
                if (g.answer_line ? got == want : contains_phrase(got, want)) {
                    g.pass = true;
                    g.answer = s;
                    break;
                }
            }
            if (!g.pass) g.answer = g.answer_line ? got.substr(0, 80) : "";
            break;
        }
        case answer_kind::lines: {
            const std::vector<int64_t> n = all_integers(text);
            for (size_t k = 0; k < n.size(); ++k) g.answer += (k ? "," : "") + std::to_string(n[k]);
            if (q.groups.empty()) {
                g.pass =
                    !n.empty() && std::all_of(n.begin(), n.end(), [](int64_t v) { return v == 0; });
                break;
            }
            bool ok = !n.empty();
            for (int64_t v : n) {
                const bool inside = std::any_of(q.groups.begin(), q.groups.end(), [&](auto r) {
                    return v >= r.first && v <= r.second;
                });
                ok = ok && inside;
            }
            for (const auto& r : q.groups) {
                ok = ok && std::any_of(n.begin(), n.end(),
                                       [&](int64_t v) { return v >= r.first && v <= r.second; });
            }
            g.pass = ok;
            break;
        }
    }
    return g;
}

}  // namespace magnetar::eval
