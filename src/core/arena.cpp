#include "core/arena.h"

#include "core/format.h"

namespace magnetar {

namespace {

// Bytes of a contiguous tensor with every step checked: a measuring pass sizes buffers from
// shapes that follow from the model file and the caller's context, so a size that does not fit
// in size_t is an error, not a wrapped-around small buffer.
size_t checked_tensor_bytes(ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    int64_t rows = 0;
    size_t bytes = 0;
    if (ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0 || __builtin_mul_overflow(ne1, ne2, &rows) ||
        __builtin_mul_overflow(rows, ne3, &rows) ||
        __builtin_mul_overflow(row_bytes(type, ne0), static_cast<size_t>(rows), &bytes)) {
        throw Error(strfmt(
            "scratch arena: a tensor of %lld x %lld x %lld x %lld elements does not fit in memory",
            static_cast<long long>(ne0), static_cast<long long>(ne1), static_cast<long long>(ne2),
            static_cast<long long>(ne3)));
    }
    return bytes;
}

}  // namespace

tensor arena::alloc(ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    if (measuring_) {
        const size_t bytes = checked_tensor_bytes(type, ne0, ne1, ne2, ne3);
        size_t end = 0;
        if (used_ > SIZE_MAX - kAlign ||
            __builtin_add_overflow((used_ + kAlign - 1) / kAlign * kAlign, bytes, &end)) {
            throw Error("scratch arena: the measured size overflows");
        }
        used_ = end;
        if (used_ > peak_) peak_ = used_;
        return make_tensor(nullptr, type, ne0, ne1, ne2, ne3);
    }
    const size_t bytes = tensor_bytes(type, ne0, ne1, ne2, ne3);
    const size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
    used_ = offset + bytes;
    if (used_ > peak_) peak_ = used_;
    MAGNETAR_ASSERT(used_ <= capacity_,
                    "scratch arena overflow: the measuring pass missed an allocation");
    return make_tensor(base_ + offset, type, ne0, ne1, ne2, ne3);
}

}  // namespace magnetar
