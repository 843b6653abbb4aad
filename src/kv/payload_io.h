// Internal to src/kv: the byte stream under both session payloads (kv/payload.h for V4,
// kv/payload41.h for V4.1): writing to a byte_sink and reading from a byte_source with the
// remaining size tracked, and moving backend tensor rows through a bounded host buffer.
//
// Owns: the transfer pieces and the two messages every payload error starts with ("session
// payload: truncated in ...", "... read failed in ..."). Does not own: any layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/format.h"
#include "core/tensor.h"
#include "magnetar/session.h"

namespace magnetar::kv {

// Rows moved per backend transfer: bounds the host buffer whatever the context.
inline constexpr int64_t k_payload_rows_per_piece = 1024;

class payload_writer {
  public:
    explicit payload_writer(const byte_sink& sink) : sink_(sink) {}
    void bytes(const void* p, size_t n) {
        if (n == 0) return;
        if (!sink_(p, n)) throw Error("session payload: write failed");
        written_ += n;
    }
    void u32(uint32_t v) { bytes(&v, 4); }
    // Rows [r0, r0 + n) of a backend tensor (any row type), in pieces.
    void rows(backend::backend& be, const tensor& t, int64_t r0, int64_t n) {
        for (int64_t done = 0; done < n;) {
            const int64_t k = std::min(k_payload_rows_per_piece, n - done);
            const tensor v = view_rows(t, r0 + done, k);
            buf_.resize(tensor_bytes(v.type, v.ne[0], k));
            be.download(v, buf_.data());
            bytes(buf_.data(), buf_.size());
            done += k;
        }
    }
    void whole(backend::backend& be, const tensor& t) { rows(be, t, 0, t.ne[1]); }
    uint64_t written() const { return written_; }

  private:
    const byte_sink& sink_;
    std::vector<uint8_t> buf_;
    uint64_t written_ = 0;
};

class payload_reader {
  public:
    payload_reader(const byte_source& source, uint64_t size) : source_(source), left_(size) {}
    // `what` names the part being read in the error messages.
    void bytes(void* p, size_t n, const char* what) {
        if (n > left_) {
            throw Error(strfmt("session payload: truncated in %s (%zu bytes needed, %llu left)",
                               what, n, static_cast<unsigned long long>(left_)));
        }
        if (n > 0 && !source_(p, n))
            throw Error(strfmt("session payload: read failed in %s", what));
        left_ -= n;
    }
    uint32_t u32(const char* what) {
        uint32_t v = 0;
        bytes(&v, 4, what);
        return v;
    }
    // Rows [r0, r0 + n) of a backend tensor (any row type), in pieces.
    void rows(backend::backend& be, const tensor& t, int64_t r0, int64_t n, const char* what) {
        for (int64_t done = 0; done < n;) {
            const int64_t k = std::min(k_payload_rows_per_piece, n - done);
            const tensor v = view_rows(t, r0 + done, k);
            buf_.resize(tensor_bytes(v.type, v.ne[0], k));
            bytes(buf_.data(), buf_.size(), what);
            be.upload(v, buf_.data());
            done += k;
        }
    }
    void whole(backend::backend& be, const tensor& t, const char* what) {
        rows(be, t, 0, t.ne[1], what);
    }
    // Reads n bytes and drops them.
    void skip(uint64_t n, const char* what) {
        while (n > 0) {
            const size_t k = static_cast<size_t>(std::min<uint64_t>(n, 1u << 20));
            buf_.resize(k);
            bytes(buf_.data(), k, what);
            n -= k;
        }
    }
    uint64_t left() const { return left_; }

  private:
    const byte_source& source_;
    uint64_t left_;
    std::vector<uint8_t> buf_;
};

}  // namespace magnetar::kv
