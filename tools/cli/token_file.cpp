#include "cli/token_file.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace magnetar::cli {

std::vector<int32_t> read_token_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot read token file " + path);
    nlohmann::json j;
    try {
        f >> j;
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path + ": not valid JSON: " + e.what());
    }
    if (!j.is_array()) throw std::runtime_error(path + ": expected a JSON array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
        const auto& v = j[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
            throw std::runtime_error(path + ": element " + std::to_string(i) +
                                     " is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    if (ids.empty()) throw std::runtime_error(path + ": no token ids");
    return ids;
}

}  // namespace magnetar::cli
