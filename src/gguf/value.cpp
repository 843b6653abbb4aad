// GGUF metadata values and tensor_info::shape_str: constructors, comparison, names.
//
// Owns: the in-memory representation of metadata values (src/gguf/gguf.h). Does not own the
// byte encoding, which lives in reader.cpp and writer.cpp.
#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "gguf/gguf.h"

namespace magnetar::gguf {

const char* value_type_name(value_type t) {
    switch (t) {
        case value_type::u8:
            return "u8";
        case value_type::i8:
            return "i8";
        case value_type::u16:
            return "u16";
        case value_type::i16:
            return "i16";
        case value_type::u32:
            return "u32";
        case value_type::i32:
            return "i32";
        case value_type::f32:
            return "f32";
        case value_type::boolean:
            return "bool";
        case value_type::string:
            return "string";
        case value_type::array:
            return "array";
        case value_type::u64:
            return "u64";
        case value_type::i64:
            return "i64";
        case value_type::f64:
            return "f64";
    }
    return "unknown";
}

namespace {

value make_unsigned(value_type t, uint64_t v) {
    value out;
    out.type = t;
    out.u = v;
    return out;
}

value make_signed(value_type t, int64_t v) {
    value out;
    out.type = t;
    out.i = v;
    return out;
}

value make_floating(value_type t, double v) {
    value out;
    out.type = t;
    out.f = v;
    return out;
}

// Floats compare by bit pattern: a round trip must reproduce the exact value, NaN included,
// and 0.0 and -0.0 are different files.
bool same_bits(double a, double b) {
    return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

}  // namespace

value value::make_u8(uint8_t v) {
    return make_unsigned(value_type::u8, v);
}
value value::make_i8(int8_t v) {
    return make_signed(value_type::i8, v);
}
value value::make_u16(uint16_t v) {
    return make_unsigned(value_type::u16, v);
}
value value::make_i16(int16_t v) {
    return make_signed(value_type::i16, v);
}
value value::make_u32(uint32_t v) {
    return make_unsigned(value_type::u32, v);
}
value value::make_i32(int32_t v) {
    return make_signed(value_type::i32, v);
}
value value::make_u64(uint64_t v) {
    return make_unsigned(value_type::u64, v);
}
value value::make_i64(int64_t v) {
    return make_signed(value_type::i64, v);
}
value value::make_f32(float v) {
    return make_floating(value_type::f32, static_cast<double>(v));
}
value value::make_f64(double v) {
    return make_floating(value_type::f64, v);
}
value value::make_bool(bool v) {
    return make_unsigned(value_type::boolean, v ? 1 : 0);
}

value value::make_string(std::string v) {
    value out;
    out.type = value_type::string;
    out.s = std::move(v);
    return out;
}

value value::make_array(value_type elem, std::vector<value> items) {
    value out;
    out.type = value_type::array;
    out.elem_type = elem;
    out.arr = std::move(items);
    return out;
}

value value::make_string_array(const std::vector<std::string>& items) {
    std::vector<value> vals;
    vals.reserve(items.size());
    for (const auto& s : items) vals.push_back(make_string(s));
    return make_array(value_type::string, std::move(vals));
}

value value::make_i32_array(const std::vector<int32_t>& items) {
    std::vector<value> vals;
    vals.reserve(items.size());
    for (int32_t v : items) vals.push_back(make_i32(v));
    return make_array(value_type::i32, std::move(vals));
}

value value::make_f32_array(const std::vector<float>& items) {
    std::vector<value> vals;
    vals.reserve(items.size());
    for (float v : items) vals.push_back(make_f32(v));
    return make_array(value_type::f32, std::move(vals));
}

bool value::is_integer() const {
    switch (type) {
        case value_type::u8:
        case value_type::i8:
        case value_type::u16:
        case value_type::i16:
        case value_type::u32:
        case value_type::i32:
        case value_type::u64:
        case value_type::i64:
            return true;
        default:
            return false;
    }
}

bool value::is_float() const {
    return type == value_type::f32 || type == value_type::f64;
}

// Only the member that the type selects takes part: a value built by make_u32 and one read
// from a file are equal even if unrelated members differ.
bool value::operator==(const value& o) const {
    if (type != o.type) return false;
    switch (type) {
        case value_type::u8:
        case value_type::u16:
        case value_type::u32:
        case value_type::u64:
        case value_type::boolean:
            return u == o.u;
        case value_type::i8:
        case value_type::i16:
        case value_type::i32:
        case value_type::i64:
            return i == o.i;
        case value_type::f32:
        case value_type::f64:
            return same_bits(f, o.f);
        case value_type::string:
            return s == o.s;
        case value_type::array:
            return elem_type == o.elem_type && arr == o.arr;
    }
    return false;
}

std::string tensor_info::shape_str() const {
    std::string out = "[";
    for (uint32_t d = 0; d < n_dims && d < static_cast<uint32_t>(kMaxDims); ++d) {
        if (d) out += ", ";
        out += std::to_string(ne[d]);
    }
    out += "]";
    return out;
}

}  // namespace magnetar::gguf
