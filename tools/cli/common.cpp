#include "cli/common.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "core/error.h"
#include "core/paths.h"

namespace magnetar::cli {

std::string resolve_model_path(const std::string& flag) {
    if (!flag.empty()) return flag;
    if (const char* e = std::getenv("MAGNETAR_MODEL"); e && *e) return e;
    const std::string found = find_in_ancestors(kDefaultModelRelPath);
    if (!found.empty()) return found;
    throw Error(
        std::string(
            "no model given: pass -m FILE, set MAGNETAR_MODEL, or create the default model ") +
        kDefaultModelRelPath + " with scripts/setup.sh");
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void check_output(const std::string& path, bool overwrite, const std::vector<std::string>& inputs) {
    struct stat out {};
    if (overwrite || ::stat(path.c_str(), &out) != 0) return;
    for (const std::string& in : inputs) {
        struct stat st {};
        if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
            throw std::runtime_error(path +
                                     " is also the input; give another output path, or "
                                     "--overwrite to replace the input");
        }
    }
    throw std::runtime_error(path + " exists; --overwrite replaces it");
}

void write_file_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error(path + ": cannot write");
}

}  // namespace magnetar::cli
