#include "core/arena.h"

namespace magnetar {

tensor arena::alloc(ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const size_t bytes = tensor_bytes(type, ne0, ne1, ne2, ne3);
    const size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
    used_ = offset + bytes;
    if (used_ > peak_) peak_ = used_;
    if (measuring_) return make_tensor(nullptr, type, ne0, ne1, ne2, ne3);
    MAGNETAR_ASSERT(used_ <= capacity_,
                    "scratch arena overflow: the measuring pass missed an allocation");
    return make_tensor(base_ + offset, type, ne0, ne1, ne2, ne3);
}

}  // namespace magnetar
