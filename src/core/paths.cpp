#include "core/paths.h"

#include <filesystem>
#include <vector>

namespace magnetar {

namespace fs = std::filesystem;

std::string find_in_ancestors(const std::string& rel) {
    std::vector<fs::path> starts;
    std::error_code ec;
    starts.push_back(fs::current_path(ec));
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) starts.push_back(exe.parent_path());
    for (fs::path dir : starts) {
        for (int up = 0; up < 6 && !dir.empty(); ++up) {
            if (fs::exists(dir / rel, ec)) return (dir / rel).string();
            if (dir == dir.parent_path()) break;
            dir = dir.parent_path();
        }
    }
    return {};
}

}  // namespace magnetar
