#include "cli/common.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace magnetar::cli {

namespace fs = std::filesystem;

std::string resolve_model_path(const std::string& flag) {
    if (!flag.empty()) return flag;
    if (const char* e = std::getenv("MAGNETAR_MODEL"); e && *e) return e;
    std::vector<fs::path> starts;
    std::error_code ec;
    starts.push_back(fs::current_path(ec));
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) starts.push_back(exe.parent_path());
    for (fs::path dir : starts) {
        for (int up = 0; up < 6 && !dir.empty(); ++up) {
            if (fs::exists(dir / kDefaultModelRelPath, ec)) return (dir / kDefaultModelRelPath).string();
            if (dir == dir.parent_path()) break;
            dir = dir.parent_path();
        }
    }
    throw Error(std::string("no model given: pass -m FILE, set MAGNETAR_MODEL, or create the default model ") +
                kDefaultModelRelPath + " with scripts/setup.sh");
}

}  // namespace magnetar::cli
