// The agent's working directory: see workspace.h.
#include "agent/workspace.h"

#include <stdexcept>
#include <system_error>

namespace fs = std::filesystem;

namespace magnetar::agent {

namespace {

// Whether `p` is `base` or below it (both canonical).
bool below(const fs::path& p, const fs::path& base) {
    auto b = base.begin();
    auto q = p.begin();
    for (; b != base.end(); ++b, ++q) {
        if (b->empty()) continue;  // a trailing separator
        if (q == p.end() || *q != *b) return false;
    }
    return true;
}

}  // namespace

workspace::workspace(const fs::path& root, const std::vector<fs::path>& also_allowed) {
    std::error_code ec;
    root_ = fs::canonical(root, ec);
    if (ec || !fs::is_directory(root_)) {
        throw std::runtime_error("agent: the working directory " + root.string() +
                                 " is not a directory");
    }
    allowed_.push_back(root_);
    for (const fs::path& a : also_allowed) {
        const fs::path c = fs::canonical(a, ec);
        if (ec || !fs::is_directory(c)) {
            throw std::runtime_error("agent: the allowed directory " + a.string() +
                                     " is not a directory");
        }
        allowed_.push_back(c);
    }
}

bool workspace::inside(const fs::path& p) const {
    for (const fs::path& a : allowed_)
        if (below(p, a)) return true;
    return false;
}

fs::path workspace::resolve(const std::string& p, std::string* why) const {
    if (p.empty()) {
        *why = "empty path";
        return {};
    }
    if (p.find('\0') != std::string::npos) {
        *why = "the path contains a NUL byte";
        return {};
    }
    const fs::path given(p);
    const fs::path joined = given.is_absolute() ? given : root_ / given;
    std::error_code ec;
    // Symbolic links of the existing part are followed, so a link cannot lead outside.
    const fs::path c = fs::weakly_canonical(joined, ec);
    if (ec) {
        *why = "cannot resolve " + p + ": " + ec.message();
        return {};
    }
    if (!inside(c)) {
        *why = p + " is outside the working directory " + root_.string();
        return {};
    }
    return c;
}

std::string workspace::display(const fs::path& p) const {
    if (below(p, root_)) {
        const fs::path rel = p.lexically_relative(root_);
        return rel.empty() || rel == "." ? std::string(".") : rel.string();
    }
    return p.string();
}

}  // namespace magnetar::agent
