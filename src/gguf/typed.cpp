#include "gguf/typed.h"

#include "core/error.h"
#include "core/format.h"

namespace magnetar::gguf {

[[noreturn]] void key_error(const gguf::reader& f, const std::string& key,
                            const std::string& what) {
    throw Error(strfmt("%s: metadata key '%s': %s", f.path().c_str(), key.c_str(), what.c_str()));
}

const value& require(const gguf::reader& f, const std::string& key) {
    const value* v = f.find(key);
    if (!v) key_error(f, key, "required key is missing");
    return *v;
}

// Integer keys must be u32 (spec §12.7).
uint32_t get_u32(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    if (v.type != value_type::u32) {
        key_error(f, key, strfmt("expected type u32, got %s", gguf::value_type_name(v.type)));
    }
    return static_cast<uint32_t>(v.u);
}

uint32_t get_u32_opt(const gguf::reader& f, const std::string& key, uint32_t def) {
    return f.find(key) ? get_u32(f, key) : def;
}

// u32 or u64.
uint64_t get_u32_or_u64(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    if (v.type != value_type::u32 && v.type != value_type::u64) {
        key_error(f, key,
                  strfmt("expected type u32 or u64, got %s", gguf::value_type_name(v.type)));
    }
    return v.u;
}

// Float keys accept f32, f64, u32 or i32 (spec §12.7).
float get_float(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    switch (v.type) {
        case value_type::f32:
        case value_type::f64:
            return static_cast<float>(v.f);
        case value_type::u32:
            return static_cast<float>(v.u);
        case value_type::i32:
            return static_cast<float>(v.i);
        default:
            break;
    }
    key_error(f, key,
              strfmt("expected type f32, f64, u32 or i32, got %s", gguf::value_type_name(v.type)));
}

bool get_bool(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    if (v.type != value_type::boolean) {
        key_error(f, key, strfmt("expected type bool, got %s", gguf::value_type_name(v.type)));
    }
    return v.u != 0;
}

std::vector<uint32_t> get_u32_array(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    if (v.type != value_type::array ||
        (v.elem_type != value_type::i32 && v.elem_type != value_type::u32)) {
        key_error(f, key, "expected an array of i32 or u32");
    }
    std::vector<uint32_t> out;
    out.reserve(v.arr.size());
    for (size_t i = 0; i < v.arr.size(); ++i) {
        const value& e = v.arr[i];
        int64_t x = e.type == value_type::i32 ? e.i : static_cast<int64_t>(e.u);
        if (x < 0)
            key_error(f, key, strfmt("entry %zu is negative (%lld)", i, static_cast<long long>(x)));
        out.push_back(static_cast<uint32_t>(x));
    }
    return out;
}

std::vector<float> get_f32_array(const gguf::reader& f, const std::string& key) {
    const value& v = require(f, key);
    if (v.type != value_type::array ||
        (v.elem_type != value_type::f32 && v.elem_type != value_type::f64)) {
        key_error(f, key, "expected an array of f32 or f64");
    }
    std::vector<float> out;
    out.reserve(v.arr.size());
    for (const value& e : v.arr) out.push_back(static_cast<float>(e.f));
    return out;
}

}  // namespace magnetar::gguf
