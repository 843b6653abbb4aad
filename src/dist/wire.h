// Snapshot data (op::save_state / load_state) in messages of at most k_state_piece bytes, and
// the HC state on the wire: F32 as computed, or BF16 (round to nearest even), the layout of an
// eval command's data (token ids, then the state) and its size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "dist/comm.h"
#include "dist/protocol.h"
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

inline void decode_eval(const uint8_t* in, int64_t n, int64_t hc_width, bool bf16, int32_t* tokens,
                        float* hc) {
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

// Sends n bytes as ceil(n / k_state_piece) messages with `tag` (none when n is 0).
inline void send_state(int dest, int tag, const uint8_t* data, size_t n) {
    for (size_t at = 0; at < n; at += k_state_piece)
        send(dest, tag, data + at, std::min(k_state_piece, n - at));
}

// Receives the n bytes send_state sent.
inline void recv_state(int src, int tag, uint8_t* data, size_t n, double timeout_s,
                       const char* what) {
    for (size_t at = 0; at < n;) {
        const size_t k = std::min(k_state_piece, n - at);
        const size_t got = recv(src, tag, data + at, k, timeout_s, what);
        if (got != k)
            throw Error(strfmt("pipeline: %s: a piece of %zu bytes, expected %zu", what, got, k));
        at += k;
    }
}

}  // namespace magnetar::dist
