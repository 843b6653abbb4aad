// Private details of the GGUF byte format shared by the reader and the writer.
//
// Owns: the limits both sides agree on (array nesting depth) and the fixed byte sizes of the
// scalar value types. Not part of the public API: only src/gguf/*.cpp include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"

namespace magnetar::gguf::detail {

// Arrays of arrays may nest this deep (a plain array is depth 1). The writer refuses deeper
// values so that everything it writes can be read back; the reader refuses them so that a
// crafted file cannot recurse without bound.
constexpr int kMaxArrayDepth = 8;

// True for the thirteen value type ids of the format.
inline bool is_known_value_type(uint32_t id) {
    return id <= static_cast<uint32_t>(value_type::f64);
}

// Encoded size of a fixed-size value type; 0 for string and array.
inline size_t scalar_size(value_type t) {
    switch (t) {
        case value_type::u8:
        case value_type::i8:
        case value_type::boolean:
            return 1;
        case value_type::u16:
        case value_type::i16:
            return 2;
        case value_type::u32:
        case value_type::i32:
        case value_type::f32:
            return 4;
        case value_type::u64:
        case value_type::i64:
        case value_type::f64:
            return 8;
        case value_type::string:
        case value_type::array:
            return 0;
    }
    return 0;
}

// Smallest number of bytes one encoded value of type t can occupy: what a count must be
// checked against before anything is reserved for it.
inline size_t min_encoded_size(value_type t) {
    if (t == value_type::string) return 8;     // u64 length
    if (t == value_type::array) return 4 + 8;  // u32 element type + u64 count
    return scalar_size(t);
}

}  // namespace magnetar::gguf::detail
