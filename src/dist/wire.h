// The HC state on the wire: F32 as computed, or BF16 (round to nearest even), the layout of an
// eval command's data (token ids, then the state) and its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/fp16.h"

namespace magnetar::dist {

inline size_t eval_data_bytes(int64_t n, int64_t hc_width, bool bf16) {
    const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(hc_width);
    return static_cast<size_t>(n) * sizeof(int32_t) + elems * (bf16 ? 2 : 4);
}

// Writes tokens [n] and the state [n, hc_width] to out (eval_data_bytes).
inline void encode_eval(const int32_t* tokens, const float* hc, int64_t n, int64_t hc_width,
                        bool bf16, uint8_t* out) {
    std::memcpy(out, tokens, static_cast<size_t>(n) * sizeof(int32_t));
    uint8_t* p = out + static_cast<size_t>(n) * sizeof(int32_t);
    const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(hc_width);
    if (!bf16) {
        std::memcpy(p, hc, elems * sizeof(float));
        return;
    }
    for (size_t i = 0; i < elems; ++i) {
        const uint16_t b = f32_to_bf16(hc[i]);
        std::memcpy(p + 2 * i, &b, 2);
    }
}

inline void decode_eval(const uint8_t* in, int64_t n, int64_t hc_width, bool bf16,
                        int32_t* tokens, float* hc) {
    std::memcpy(tokens, in, static_cast<size_t>(n) * sizeof(int32_t));
    const uint8_t* p = in + static_cast<size_t>(n) * sizeof(int32_t);
    const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(hc_width);
    if (!bf16) {
        std::memcpy(hc, p, elems * sizeof(float));
        return;
    }
    for (size_t i = 0; i < elems; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        hc[i] = bf16_to_f32(b);
    }
}

}  // namespace magnetar::dist
