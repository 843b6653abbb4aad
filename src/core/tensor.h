// Tensor view: a typed, shaped window onto bytes owned by someone else (a backend buffer, the
// memory-mapped model file, a scratch arena).
//
// Owns: the shape vocabulary of the forward pass. `ne[0]` is the contiguous dimension (GGUF
// order); `nb[d]` is the byte stride of dimension d. Views never own or free memory. Does not
// own: allocation (core/arena.h, backend buffers) or any arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/types.h"

namespace magnetar {

struct tensor {
    void* data = nullptr;
    ggml_type type = ggml_type::F32;
    int64_t ne[4] = {1, 1, 1, 1};
    size_t nb[4] = {0, 0, 0, 0};

    explicit operator bool() const { return data != nullptr; }
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // Number of rows when viewed as a matrix of ne[0]-element rows.
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    // Contiguous rows: row r starts at data + r * nb[1] (dims 2, 3 collapse into rows).
    bool rows_contiguous() const {
        return nb[2] == nb[1] * static_cast<size_t>(ne[1]) &&
               nb[3] == nb[2] * static_cast<size_t>(ne[2]);
    }

    uint8_t* row_ptr(int64_t r) const {
        return static_cast<uint8_t*>(data) + static_cast<size_t>(r) * nb[1];
    }
    float* f32_row(int64_t r) const { return reinterpret_cast<float*>(row_ptr(r)); }
    int32_t* i32_row(int64_t r) const { return reinterpret_cast<int32_t*>(row_ptr(r)); }
    float* f32() const { return static_cast<float*>(data); }
    int32_t* i32() const { return static_cast<int32_t*>(data); }
};

// A contiguous tensor of `type` over `data` with shape ne0 x ne1 x ne2 x ne3.
tensor make_tensor(void* data, ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1,
                   int64_t ne3 = 1);

// Bytes of a contiguous tensor of this type and shape.
size_t tensor_bytes(ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);

// Rows [r0, r0 + n) of a tensor seen as a matrix of ne[0]-element rows; the result is 2-D.
tensor view_rows(const tensor& t, int64_t r0, int64_t n);

// Columns [c0, c0 + n) of every row of a 2-D float or int tensor (keeps the row stride).
tensor view_cols(const tensor& t, int64_t c0, int64_t n);

// The same bytes with a new contiguous shape (the element count must match).
tensor reshape(const tensor& t, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);

}  // namespace magnetar
