// Token-id files of the CLI front ends: a JSON array of integer ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magnetar::cli {

// Reads IDS.json; throws std::runtime_error naming the file on any problem.
std::vector<int32_t> read_token_file(const std::string& path);

}  // namespace magnetar::cli
