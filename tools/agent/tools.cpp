// The agent's built-in tools behind one call: see tools.h.
#include "agent/tools.h"

#include <cmath>

#include "core/format.h"

namespace magnetar::agent {

using json = nlohmann::ordered_json;

const std::vector<tool_spec>& tool_specs() {
    static const std::vector<tool_spec> specs = {
        {"bash",
         "Run a shell command in the working directory as a tracked job (its own process "
         "group). Waits up to `wait` seconds, then reports the output (head, then tail) or that "
         "it still runs; `timeout` kills it.",
         {{"command", "string", true, "the command line (bash -c)"},
          {"timeout", "number", false, "seconds before the job is killed (default 120)"},
          {"wait", "number", false, "seconds to wait for it before reporting (default 30)"}}},
        {"bash_status",
         "The state and output of a job started by bash; waits up to `wait` seconds for it.",
         {{"job", "integer", true, "the job number"},
          {"wait", "number", false, "seconds to wait for it to end (default 0)"}}},
        {"bash_stop",
         "End a running job (SIGTERM to its group, SIGKILL after 2 s).",
         {{"job", "integer", true, "the job number"}}},
        {"read",
         "Show a file's lines, numbered, from `offset` (1-based), `limit` lines at a time "
         "(default 250); `whole` shows every line when they fit.",
         {{"path", "string", true, "the file"},
          {"offset", "integer", false, "first line (default 1)"},
          {"limit", "integer", false, "lines to show"},
          {"whole", "boolean", false, "the whole file (refused when it does not fit)"}}},
        {"more",
         "Continue the latest read where it stopped.",
         {{"path", "string", false, "the file (default: the latest one read)"}}},
        {"write",
         "Create or replace a file with `content` (folders are created).",
         {{"path", "string", true, "the file"}, {"content", "string", true, "the whole text"}}},
        {"edit",
         "Change a file: replace the one exact occurrence of `old` by `new`, or replace lines "
         "`first`..`last` (as last shown by read; last = first - 1 inserts) by `new`.",
         {{"path", "string", true, "the file"},
          {"old", "string", false, "exact text to replace (unique in the file)"},
          {"first", "integer", false, "first line of the range"},
          {"last", "integer", false, "last line of the range"},
          {"new", "string", true, "the replacement text"}}},
        {"search",
         "Find lines matching `pattern` (literal, or a regular expression with regex) under "
         "`path`, optionally only in files matching `glob`; .git is skipped.",
         {{"pattern", "string", true, "text or regular expression"},
          {"path", "string", false, "file or folder (default .)"},
          {"regex", "boolean", false, "pattern is a regular expression"},
          {"glob", "string", false, "file-name filter, e.g. *.cpp"},
          {"max", "integer", false, "most matches (default 100, at most 1000)"}}},
        {"list",
         "List a folder: folders end with /, files show their size.",
         {{"path", "string", false, "the folder (default .)"}}},
    };
    return specs;
}

namespace {

const tool_spec* find_spec(const std::string& name) {
    for (const tool_spec& s : tool_specs())
        if (s.name == name) return &s;
    return nullptr;
}

bool type_ok(const json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer();
    if (type == "number") return v.is_number() && std::isfinite(v.get<double>());
    if (type == "boolean") return v.is_boolean();
    return false;
}

// Model-written calls carry every parameter as text unless it says otherwise: "12" for an
// integer, "true" for a boolean. Converts such strings to the declared type.
json coerce(const json& v, const std::string& type) {
    if (!v.is_string() || type == "string") return v;
    const std::string& s = v.get_ref<const std::string&>();
    if (type == "boolean") {
        if (s == "true") return true;
        if (s == "false") return false;
        return v;
    }
    try {
        size_t used = 0;
        if (type == "integer") {
            const long long x = std::stoll(s, &used);
            if (used == s.size()) return x;
        } else if (type == "number") {
            const double x = std::stod(s, &used);
            if (used == s.size()) return x;
        }
    } catch (const std::exception&) {
    }
    return v;
}

}  // namespace

agent_tools::agent_tools(const std::filesystem::path& root,
                         const std::vector<std::filesystem::path>& also_allowed, file_limits files,
                         job_limits jobs)
    : ws_(root, also_allowed), files_(ws_, files), jobs_(ws_.root(), jobs) {}

tool_result agent_tools::call(const std::string& name, const json& raw) {
    const tool_spec* spec = find_spec(name);
    if (!spec) {
        std::string known;
        for (const tool_spec& s : tool_specs()) known += (known.empty() ? "" : ", ") + s.name;
        return {false, "error: no tool named " + name + " (tools: " + known + ")"};
    }
    if (!raw.is_object()) return {false, "error: " + name + ": the arguments must be an object"};
    json a = json::object();
    for (const auto& [key, v] : raw.items()) {
        const tool_param* p = nullptr;
        for (const tool_param& q : spec->params)
            if (q.name == key) p = &q;
        if (!p) return {false, "error: " + name + ": unknown parameter " + key};
        const json c = coerce(v, p->type);
        if (!type_ok(c, p->type)) {
            return {false, "error: " + name + ": parameter " + key + " must be a " + p->type};
        }
        a[key] = c;
    }
    for (const tool_param& p : spec->params) {
        if (p.required && !a.contains(p.name)) {
            return {false, "error: " + name + ": missing parameter " + p.name};
        }
    }
    const auto str = [&](const char* k) { return a.value(k, std::string()); };
    const auto num = [&](const char* k, double d) {
        return a.contains(k) ? a[k].get<double>() : d;
    };
    const auto integer = [&](const char* k, int64_t d) {
        return a.contains(k) ? a[k].get<int64_t>() : d;
    };
    if (name == "bash") return jobs_.start(str("command"), num("timeout", 0), num("wait", -1));
    if (name == "bash_status") {
        return jobs_.status(static_cast<int>(integer("job", 0)), num("wait", 0));
    }
    if (name == "bash_stop") return jobs_.stop(static_cast<int>(integer("job", 0)));
    if (name == "read") {
        return files_.read(str("path"), integer("offset", 1), integer("limit", 0),
                           a.value("whole", false));
    }
    if (name == "more") return files_.more(str("path"));
    if (name == "write") return files_.write(str("path"), str("content"));
    if (name == "edit") {
        const bool by_text = a.contains("old");
        const bool by_lines = a.contains("first") || a.contains("last");
        if (by_text == by_lines) {
            return {false, "error: edit: give either `old` or `first` and `last`"};
        }
        if (by_text) return files_.edit_text(str("path"), str("old"), str("new"));
        if (!a.contains("first") || !a.contains("last")) {
            return {false, "error: edit: a line range needs both `first` and `last`"};
        }
        return files_.edit_lines(str("path"), integer("first", 0), integer("last", 0), str("new"));
    }
    if (name == "search") {
        return files_.search(str("pattern"), str("path"), a.value("regex", false), str("glob"),
                             static_cast<int>(integer("max", 0)));
    }
    return files_.list(str("path"));
}

}  // namespace magnetar::agent
