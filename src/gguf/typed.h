// Typed metadata getters over a GGUF reader: required keys (throw when missing or of the wrong
// type) and optional ones (a default when missing, an error when present with the wrong type).
// Every error names the file and the key and says what was expected and what was found:
// "FILE: metadata key 'deepseek4.block_count': expected type u32, got string".
//
// Strict types, as GGUF writers of the published layout produce them (model.md §12.7): integer
// keys are u32 (u64 where a count may exceed 2^32), float keys f32 (f64, u32 and i32 accepted),
// bools bool. Knows nothing about DeepSeek: the key names come from the caller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace magnetar::gguf {

[[noreturn]] void key_error(const reader& f, const std::string& key, const std::string& what);

// The value of a key that must be present.
const value& require(const reader& f, const std::string& key);
uint32_t get_u32(const reader& f, const std::string& key);
// `def` when the key is absent.
uint32_t get_u32_opt(const reader& f, const std::string& key, uint32_t def);
// u32 or u64.
uint64_t get_u32_or_u64(const reader& f, const std::string& key);
// f32, f64, u32 or i32.
float get_float(const reader& f, const std::string& key);
bool get_bool(const reader& f, const std::string& key);
// An array of i32 or u32 with no negative entry.
std::vector<uint32_t> get_u32_array(const reader& f, const std::string& key);
// An array of f32 or f64.
std::vector<float> get_f32_array(const reader& f, const std::string& key);

}  // namespace magnetar::gguf
