#include "core/types.h"

#include <cctype>
#include <iterator>
#include <string>

#include "core/error.h"

namespace magnetar {

namespace {

// The one table of supported types. Lookups scan it (11 entries); the order is that of
// listings (all_type_traits: help texts, `bench kernels`).
const type_traits kTraits[] = {
    {ggml_type::F32, "f32", 1, 4, false, true},
    {ggml_type::F16, "f16", 1, 2, false, true},
    {ggml_type::BF16, "bf16", 1, 2, false, true},
    {ggml_type::Q8_0, "q8_0", QK8_0, 34, true, false},
    {ggml_type::Q4_K, "q4_K", QK_K, 144, true, false},
    {ggml_type::Q2_K, "q2_K", QK_K, 84, true, false},
    {ggml_type::Q8_K, "q8_K", QK_K, 292, true, false},
    {ggml_type::IQ2_XXS, "iq2_xxs", QK_K, 66, true, false},
    {ggml_type::MXFP4, "mxfp4", QK_MXFP4, 17, true, false},
    {ggml_type::I8, "i8", 1, 1, false, false},
    {ggml_type::I32, "i32", 1, 4, false, false},
};

}  // namespace

type_traits_range all_type_traits() {
    return {std::begin(kTraits), std::end(kTraits)};
}

const type_traits* find_type_traits(uint32_t id) {
    for (const auto& t : kTraits) {
        if (static_cast<uint32_t>(t.type) == id) return &t;
    }
    return nullptr;
}

const type_traits& type_traits_of(ggml_type t) {
    const type_traits* tr = find_type_traits(static_cast<uint32_t>(t));
    MAGNETAR_ASSERT(tr != nullptr, "ggml_type value outside the traits table");
    return *tr;
}

std::string_view type_name(uint32_t id) {
    if (const type_traits* t = find_type_traits(id)) return t->name;
    static thread_local std::string buf;
    buf = "type#" + std::to_string(id);
    return buf;
}

std::optional<ggml_type> type_from_name(std::string_view name) {
    for (const auto& t : kTraits) {
        std::string_view tn = t.name;
        if (tn.size() != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < tn.size() && eq; ++i) {
            eq = std::tolower(static_cast<unsigned char>(tn[i])) ==
                 std::tolower(static_cast<unsigned char>(name[i]));
        }
        if (eq) return t.type;
    }
    return std::nullopt;
}

std::optional<uint64_t> type_bytes(ggml_type t, uint64_t n_elems) {
    const type_traits& tr = type_traits_of(t);
    if (n_elems % tr.block_elems != 0) return std::nullopt;
    const uint64_t blocks = n_elems / tr.block_elems;
    uint64_t bytes;
    if (__builtin_mul_overflow(blocks, uint64_t{tr.block_bytes}, &bytes)) return std::nullopt;
    return bytes;
}

size_t row_bytes(ggml_type t, int64_t n) {
    const type_traits& tr = type_traits_of(t);
    MAGNETAR_ASSERT(n >= 0 && n % tr.block_elems == 0, "row length not a multiple of the block");
    return static_cast<size_t>(n / tr.block_elems) * tr.block_bytes;
}

}  // namespace magnetar
