// GGML tensor types: ids, block layouts and the type-traits table.
//
// Owns: the numeric type ids (identical to GGML's), block sizes, names, and byte-size
// arithmetic with overflow checks: what a tensor view, the GGUF reader and the model catalogue
// need to know about a type. Does not own: any kernel. The scalar reference kernels per type
// are quant's table (quant/types.h), the fast ones the backends' (backend/cpu/matmul.h,
// backend/cpu/simd, backend/cuda/matmul.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace magnetar {

// Values are GGML's type ids, as stored in GGUF tensor infos.
enum class ggml_type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q8_0 = 8,
    Q2_K = 10,
    Q4_K = 12,
    Q8_K = 15,  // activation partner of the K / IQ quants; never stored in model files
    IQ2_XXS = 16,
    I8 = 24,  // raw bytes (the V4.1 Engram row264 tables)
    I32 = 26,
    BF16 = 30,
    MXFP4 = 39,  // OCP MX FP4: E2M1 codes with one E8M0 exponent per 32 (V4.1 routed experts)
};

constexpr int QK8_0 = 32;     // elements per Q8_0 block
constexpr int QK_K = 256;     // elements per K-quant / IQ super-block
constexpr int QK_MXFP4 = 32;  // elements per MXFP4 block

struct type_traits {
    ggml_type type;
    const char* name;      // GGML's name: "f32", "q8_0", "iq2_xxs", ...
    uint32_t block_elems;  // elements per block (1 for plain types)
    uint32_t block_bytes;  // bytes per block
    bool is_quantized;     // true for block-quantized types
    bool is_float;         // F32 / F16 / BF16
};

// Every supported type, in table order (for listings: help texts, benchmarks, tests). A plain
// range rather than std::span: CUDA translation units include this header as C++17.
struct type_traits_range {
    const type_traits* first;
    const type_traits* last;
    const type_traits* begin() const { return first; }
    const type_traits* end() const { return last; }
    size_t size() const { return static_cast<size_t>(last - first); }
};
type_traits_range all_type_traits();

// Traits of a type id as read from a file; nullptr for ids this project does not support.
const type_traits* find_type_traits(uint32_t id);

// Traits of a known type (never null).
const type_traits& type_traits_of(ggml_type t);

// Name of a type id, "type#N" for unknown ones.
std::string_view type_name(uint32_t id);

// Parse a GGML type name ("q8_0", "IQ2_XXS", ...), case-insensitive.
std::optional<ggml_type> type_from_name(std::string_view name);

// Bytes for n_elems elements of type t. Returns nullopt if n_elems is not a multiple of the
// block size or the result overflows 64 bits.
std::optional<uint64_t> type_bytes(ggml_type t, uint64_t n_elems);

// Bytes of one row of n elements; the caller guarantees n is a multiple of the block size
// (checked with MAGNETAR_ASSERT).
size_t row_bytes(ggml_type t, int64_t n);

}  // namespace magnetar
