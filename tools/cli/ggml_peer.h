// GGML's CPU kernels (llama.cpp's), loaded at run time as the peer of `magnetar bench kernels`:
// the same weight bytes through the peer's own dot products, timed beside Magnetar's.
//
// The peer is a prebuilt `libggml-cpu*.so` (node-llama-cpp ships one per CPU generation beside
// its `libggml-base.so`). A directory is searched for those files and the variant that GGML's
// own loader would choose (the highest `ggml_backend_score()`) is kept. Only plain C entry
// points are used: `ggml_cpu_init`, `ggml_get_type_traits_cpu` (from_float, vec_dot and the
// activation type of each weight type), `ggml_type_name` and `ggml_row_size`; the traits
// record's layout is checked against known activation types at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "quant/types.h"

namespace magnetar::cli {

class ggml_peer {
  public:
    // Loads `where` (a library file or a directory of `libggml-cpu*.so`); throws Error saying
    // what is missing or wrong.
    static std::unique_ptr<ggml_peer> load(const std::string& where);
    // MAGNETAR_GGML_LIB, else the node-llama-cpp package of scripts/bench found from the
    // current or the executable's directory; empty when neither exists.
    static std::string default_location();

    ~ggml_peer();
    ggml_peer(const ggml_peer&) = delete;
    ggml_peer& operator=(const ggml_peer&) = delete;

    // The loaded file's name (e.g. "libggml-cpu-haswell.so").
    const std::string& name() const { return name_; }
    // True when the peer has a dot product for t under the same type name as Magnetar's.
    bool supports(ggml_type t) const;
    // Bytes of one activation row of n elements in t's activation type.
    size_t act_row_bytes(ggml_type t, int64_t n) const;
    // One activation row in t's activation type (the peer's own converter).
    void convert_act(ggml_type t, const float* x, void* act, int64_t n) const;
    // Dot product of one weight row of t with one converted activation row.
    float dot(ggml_type t, const void* w, const void* act, int64_t n) const;

  private:
    struct api;
    ggml_peer(std::string name, std::unique_ptr<api> fns);
    std::string name_;
    std::unique_ptr<api> api_;
};

}  // namespace magnetar::cli
