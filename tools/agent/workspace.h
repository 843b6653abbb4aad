// The agent's working directory: every path a tool takes is resolved against it and must stay
// inside it (or inside a root the user allowed as well), symbolic links included.
//
// Owns: path resolution and confinement. Does not own: what the tools do with the paths.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace magnetar::agent {

class workspace {
  public:
    // Throws std::runtime_error when root is not an existing directory.
    explicit workspace(const std::filesystem::path& root,
                       const std::vector<std::filesystem::path>& also_allowed = {});

    const std::filesystem::path& root() const { return root_; }
    // `p` (relative to the root, or absolute) as a canonical path inside an allowed root; the
    // existing part is resolved through its symbolic links, the rest taken as written. Empty
    // with *why set when the path leaves every allowed root or cannot be resolved.
    std::filesystem::path resolve(const std::string& p, std::string* why) const;
    // The path as the model should see it: relative to the root when inside it.
    std::string display(const std::filesystem::path& p) const;

  private:
    bool inside(const std::filesystem::path& p) const;

    std::filesystem::path root_;
    std::vector<std::filesystem::path> allowed_;  // canonical, root first
};

}  // namespace magnetar::agent
