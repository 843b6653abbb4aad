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

namespace detail {
struct iq2_sign_bytes_t {
    uint64_t v[128];
};
constexpr iq2_sign_bytes_t make_iq2_sign_bytes() {
    iq2_sign_bytes_t t{};
    for (uint32_t i = 0; i < 128; ++i) {
        const uint8_t s = iq2_ksign(i);
        for (int j = 0; j < 8; ++j)
            t.v[i] |= static_cast<uint64_t>(((s >> j) & 1) ? 0xFFu : 0x01u) << (8 * j);
    }
    return t;
}
}  // namespace detail

// Sign pattern i (iq2_ksign) as 8 bytes of +1 (0x01) or -1 (0xFF), byte j for value j: a
// compile-time table the SIMD kernels load without a first-use guard.
alignas(64) inline constexpr detail::iq2_sign_bytes_t kIq2xxsSignBytes =
    detail::make_iq2_sign_bytes();

}  // namespace magnetar
