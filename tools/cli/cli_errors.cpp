#include "cli/cli_errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

namespace magnetar::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

bool is_number(const std::string& s) {
    if (s.empty()) return false;
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return end && *end == '\0';
}

// A bound as a person writes it: integers without decimals, thousands separated; none for the
// type's extremes.
std::string bound(const std::string& text) {
    const double v = std::strtod(text.c_str(), nullptr);
    // A type's own limit (INT32_MAX, UINT32_MAX, beyond 1e15) is no limit a person set.
    if (std::fabs(v) >= 1e15 || v == 2147483647.0 || v == 4294967295.0) return "";
    if (v == std::floor(v)) {
        std::string digits = std::to_string(static_cast<long long>(std::fabs(v)));
        std::string out;
        for (size_t i = 0; i < digits.size(); ++i) {
            if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
            out += digits[i];
        }
        return (v < 0 ? "-" : "") + out;
    }
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

// The deepest subcommand that took part in the parse (nullptr: the top level).
const CLI::App* parsed_sub(const CLI::App& app) {
    for (const CLI::App* s : app.get_subcommands([](const CLI::App* a) { return a->parsed(); })) {
        const CLI::App* deeper = parsed_sub(*s);
        return deeper ? deeper : s;
    }
    return nullptr;
}

std::string command_path(const CLI::App* sub) {
    std::string path;
    for (const CLI::App* a = sub; a && a->get_parent(); a = a->get_parent())
        path = a->get_name() + (path.empty() ? "" : " " + path);
    return "magnetar" + (path.empty() ? "" : " " + path);
}

std::vector<std::string> option_names(const CLI::App* sub) {
    std::vector<std::string> out;
    if (!sub) return out;
    for (const CLI::Option* o : sub->get_options()) {
        for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    }
    return out;
}

}  // namespace

void rewrite_habits(std::vector<char*>& args) {
    static char system_flag[] = "--system";
    static char ngl_flag[] = "--n-gpu-layers";
    for (char*& arg : args) {
        const std::string a(arg);
        if (a == "-sys") arg = system_flag;  // ds4's spelling
        if (a == "-ngl") arg = ngl_flag;     // llama.cpp's
    }
}

std::string nearest(const std::string& word, const std::vector<std::string>& names) {
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const std::string& n : names) {
        const size_t d = edit_distance(word, n);
        if (d < best_d) {
            best_d = d;
            best = n;
        }
    }
    // Close enough: a third of the word, at least one edit, or a prefix of the name.
    const size_t limit = std::max<size_t>(1, word.size() / 3);
    const bool prefix = !best.empty() && best.rfind(word, 0) == 0 && word.size() >= 2;
    if (best_d <= limit || prefix) return best;
    // A name that the word starts with ("--temperature" for "--temp"): the longest one.
    std::string stem;
    for (const std::string& n : names) {
        if (n.size() >= 4 && word.rfind(n, 0) == 0 && n.size() > stem.size()) stem = n;
    }
    return stem;
}

std::string unknown_command(const std::vector<char*>& args, const std::vector<std::string>& names) {
    if (args.size() < 2) return "";
    const std::string word = args[1];
    if (word.empty() || word[0] == '-') return "";
    if (std::find(names.begin(), names.end(), word) != names.end()) return "";
    const std::string near = nearest(word, names);
    return "magnetar: unknown command \"" + word + "\"" +
           (near.empty() ? "" : "; did you mean \"" + near + "\"?") +
           " (magnetar --help lists the commands)";
}

std::string friendly_parse_error(const CLI::App& app, const CLI::ParseError& e) {
    const CLI::App* sub = parsed_sub(app);
    const std::string who = command_path(sub);
    const std::string help = " (" + who + " --help lists the options)";
    const std::string what = e.what();
    std::smatch m;

    static const std::regex range(R"(^(\S+): Value (.*) not in range (\S+) to (\S+)$)");
    if (std::regex_match(what, m, range)) {
        const std::string opt = m[1], value = m[2], lo = bound(m[3]), hi = bound(m[4]);
        if (!is_number(value))
            return who + ": " + opt + ": \"" + value + "\" is not a number" + help;
        std::string limits;
        const double v = std::strtod(value.c_str(), nullptr);
        if (!lo.empty() && v == std::strtod(std::string(m[3]).c_str(), nullptr)) {
            limits = "above " + lo;  // the value is the bound itself: an open range
        } else if (!hi.empty() && v == std::strtod(std::string(m[4]).c_str(), nullptr)) {
            limits = "below " + hi;
        } else if (!lo.empty() && !hi.empty()) {
            limits = "between " + lo + " and " + hi;
        } else if (!lo.empty()) {
            limits = "at least " + lo;
        } else if (!hi.empty()) {
            limits = "at most " + hi;
        }
        return who + ": " + opt + ": " + value + " is out of range; it must be " + limits + help;
    }
    static const std::regex convert(R"(^Could not convert: (\S+) = (.*)$)");
    if (std::regex_match(what, m, convert)) {
        return who + ": " + std::string(m[1]) + ": \"" + std::string(m[2]) + "\" is not a number" +
               help;
    }
    static const std::regex member(R"(^(\S+): (.*) not in \{(.*)\}$)");
    if (std::regex_match(what, m, member)) {
        std::string choices = m[3];
        std::replace(choices.begin(), choices.end(), ',', ' ');
        return who + ": " + std::string(m[1]) + ": \"" + std::string(m[2]) +
               "\" is not one of: " + choices + help;
    }
    static const std::regex missing(R"(^(\S+): \d+ required \S+ missing$)");
    if (std::regex_match(what, m, missing))
        return who + ": " + std::string(m[1]) + " needs a value" + help;
    static const std::regex extras(R"(^The following arguments? (?:was|were) not expected: (.*)$)");
    if (std::regex_match(what, m, extras)) {
        // CLI11 lists the leftovers last first.
        std::istringstream in(m[1].str());
        std::vector<std::string> words;
        for (std::string w; in >> w;) words.push_back(w);
        std::reverse(words.begin(), words.end());
        for (const std::string& w : words) {
            const std::string name = w.substr(0, w.find('='));
            if (name == "--grammar" || name == "--grammar-file" || name == "--json-schema" ||
                name == "--json-schema-file") {
                return who + ": " + name +
                       ": constrained output (grammars, JSON schemas) is not offered: sampling "
                       "is never restricted to a grammar. For structured replies, `magnetar "
                       "serve` takes response_format (a schema rendered in the model's own "
                       "prompt format) and tools (DSML tool calls); see docs/cli.md";
            }
        }
        std::string list;
        std::string hint;
        for (const std::string& w : words) {
            list += (list.empty() ? "" : " ") + w;
            if (hint.empty() && w.size() > 2 && w[0] == '-') {
                const std::string near = nearest(w.substr(0, w.find('=')), option_names(sub));
                if (!near.empty()) hint = "; did you mean " + near + "?";
            }
        }
        if (hint.empty() && !words.empty() && words[0][0] != '-')
            hint = "; a prompt with spaces needs quotes";
        return who + ": unexpected argument" + (words.size() == 1 ? "" : "s") + ": " + list + hint +
               help;
    }
    if (what == "A subcommand is required") {
        return who + ": a command is required" +
               (sub ? help : std::string(" (magnetar --help lists the commands)"));
    }
    return who + ": " + what + help;
}

}  // namespace magnetar::cli
