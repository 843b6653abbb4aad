// Access to the GGML golden vectors of the quant tests (shared/golden/quants, see its README).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace magnetar::test {

// Shape of the golden weight matrix.
constexpr int64_t kGoldenRows = 16;
constexpr int64_t kGoldenCols = 4096;

inline std::string golden_quants(const std::string& name) {
    return shared_dir() + "/golden/quants/" + name;
}

inline std::vector<uint32_t> float_bits(const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
    return out;
}

}  // namespace magnetar::test
