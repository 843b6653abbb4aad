// Private details of the DeepSeek V4.1 (`deepseek41`) GGUF keys shared by the reader
// (hparams_v41.cpp) and the writer (hparams_v41_write.cpp).
//
// Owns: the Engram table encoding name both sides agree on. Does not own: the key names (each
// side spells them where it reads or writes them), validation (hparams_v41_validate.cpp).
// Not part of the public API: only src/model/hparams_v41*.cpp include it.
#pragma once

namespace magnetar::detail {

// The value of `deepseek41.engram.encoding`: the only one the reader accepts, the one the
// writer writes.
inline constexpr const char* kEngramEncodingRow264 = "e4m3_e8m0_32_row264";

}  // namespace magnetar::detail
