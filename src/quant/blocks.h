// Block layouts of the GGML quantized formats, byte-identical to ggml-common.h.
//
// All fields are little-endian; 16-bit floats are stored as raw uint16_t bits.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace magnetar {

struct block_q8_0 {
    uint16_t d;        // scale (fp16)
    int8_t qs[QK8_0];  // x = d * q
};
static_assert(sizeof(block_q8_0) == 34, "Q8_0 block size");

// GGML's MXFP4 block: element j of the 32 is the E2M1 code in the low nibble of qs[j] (j < 16)
// or the high nibble of qs[j - 16]; its value is kMxfp4Values[code] * 2^(e - 128), i.e. the
// E2M1 magnitude doubled in the table and the E8M0 scale halved.
struct block_mxfp4 {
    uint8_t e;       // E8M0 exponent byte
    uint8_t qs[16];  // codes, see above
};
static_assert(sizeof(block_mxfp4) == 17, "MXFP4 block size");

// Doubled E2M1 values by code (bit 3 = sign).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

struct block_q2_K {
    uint8_t scales[QK_K / 16];  // low nibble: scale, high nibble: min, per 16 elements
    uint8_t qs[QK_K / 4];       // 2-bit codes
    uint16_t d;                 // super-block scale for scales (fp16)
    uint16_t dmin;              // super-block scale for mins (fp16)
};
static_assert(sizeof(block_q2_K) == 84, "Q2_K block size");

constexpr int K_SCALE_SIZE = 12;
struct block_q4_K {
    uint16_t d;                    // super-block scale for scales (fp16)
    uint16_t dmin;                 // super-block scale for mins (fp16)
    uint8_t scales[K_SCALE_SIZE];  // 8 six-bit scales and 8 six-bit mins, packed
    uint8_t qs[QK_K / 2];          // 4-bit codes
};
static_assert(sizeof(block_q4_K) == 144, "Q4_K block size");

struct block_iq2_xxs {
    uint16_t d;             // fp16 scale
    uint16_t qs[QK_K / 8];  // per 32 values: 4 grid indices, 4x7 sign bits, 4-bit scale
};
static_assert(sizeof(block_iq2_xxs) == 66, "IQ2_XXS block size");

struct block_q8_K {
    float d;                   // delta
    int8_t qs[QK_K];           // quants
    int16_t bsums[QK_K / 16];  // sum of quants in groups of 16
};
static_assert(sizeof(block_q8_K) == 292, "Q8_K block size");

}  // namespace magnetar
