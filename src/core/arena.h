// Scratch arena: bump allocation of tensors inside one pre-allocated block.
//
// Owns: offsets, alignment and the peak-usage count. Does not own the memory (a backend
// buffer, sized once at session creation). A measuring arena hands out tensors with null data
// and only records how many bytes a sequence of allocations would need: the forward pass is
// run once that way (against a backend that executes nothing) to size the real arena, so the
// decode loop never allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace magnetar {

class arena {
  public:
    static constexpr size_t kAlign = 64;

    arena() = default;
    arena(void* base, size_t capacity) : base_(static_cast<uint8_t*>(base)), capacity_(capacity) {}
    static arena measuring() {
        arena a;
        a.measuring_ = true;
        return a;
    }

    // Contiguous tensor; aborts if the arena was sized too small (an internal invariant: the
    // measuring pass saw the same allocations). A measuring arena checks every size for
    // overflow and throws magnetar::Error instead (the shapes come from the model and the
    // caller's context).
    tensor alloc(ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
    tensor alloc_f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return alloc(ggml_type::F32, ne0, ne1, ne2, ne3);
    }

    size_t mark() const { return used_; }
    void reset(size_t mark = 0) { used_ = mark; }
    size_t peak() const { return peak_; }
    bool is_measuring() const { return measuring_; }

  private:
    uint8_t* base_ = nullptr;
    size_t capacity_ = 0;
    size_t used_ = 0;
    size_t peak_ = 0;
    bool measuring_ = false;
};

}  // namespace magnetar
