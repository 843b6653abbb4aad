#include "core/tensor.h"

namespace magnetar {

tensor make_tensor(void* data, ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    tensor t;
    t.data = data;
    t.type = type;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = ne2;
    t.ne[3] = ne3;
    t.nb[0] = type_traits_of(type).block_bytes;
    t.nb[1] = row_bytes(type, ne0);
    t.nb[2] = t.nb[1] * static_cast<size_t>(ne1);
    t.nb[3] = t.nb[2] * static_cast<size_t>(ne2);
    return t;
}

size_t tensor_bytes(ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return row_bytes(type, ne0) * static_cast<size_t>(ne1 * ne2 * ne3);
}

tensor view_rows(const tensor& t, int64_t r0, int64_t n) {
    MAGNETAR_ASSERT(t.rows_contiguous() || (t.ne[2] == 1 && t.ne[3] == 1),
                    "view_rows needs collapsible rows");
    MAGNETAR_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= t.n_rows(), "row view out of range");
    tensor v = t;
    v.data = t.data ? t.row_ptr(r0) : nullptr;
    v.ne[1] = n;
    v.ne[2] = v.ne[3] = 1;
    v.nb[2] = v.nb[3] = t.nb[1] * static_cast<size_t>(n);
    return v;
}

tensor view_cols(const tensor& t, int64_t c0, int64_t n) {
    MAGNETAR_ASSERT(t.type == ggml_type::F32 || t.type == ggml_type::I32,
                    "column views of 4-byte types only");
    MAGNETAR_ASSERT(c0 >= 0 && n >= 0 && c0 + n <= t.ne[0], "column view out of range");
    tensor v = t;
    v.data = t.data ? static_cast<uint8_t*>(t.data) + static_cast<size_t>(c0) * 4 : nullptr;
    v.ne[0] = n;
    return v;
}

tensor reshape(const tensor& t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    MAGNETAR_ASSERT(t.rows_contiguous() && t.nb[1] == row_bytes(t.type, t.ne[0]),
                    "reshape needs a contiguous tensor");
    MAGNETAR_ASSERT(ne0 * ne1 * ne2 * ne3 == t.n_elements(), "reshape changes the element count");
    return make_tensor(t.data, t.type, ne0, ne1, ne2, ne3);
}

}  // namespace magnetar
