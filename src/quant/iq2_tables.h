// Lookup tables of the IQ2_XXS format.
#pragma once

#include <cstdint>

namespace magnetar {

// 256-entry lattice grid; byte j of entry g is the magnitude of value j.
extern const uint64_t kIq2xxsGrid[256];

// Sign pattern for a 7-bit sign index: the index with bit 7 set when its popcount is odd,
// so every pattern has an even number of negative values.
constexpr uint8_t iq2_ksign(uint32_t i) {
    uint32_t p = i ^ (i >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return static_cast<uint8_t>(i | ((p & 1u) << 7));
}

}  // namespace magnetar
