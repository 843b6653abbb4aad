// Test helper: writes small DeepSeek V4 GGUFs straight from the catalogue, with hooks to break
// one thing (drop a tensor, change a shape or type, edit a key) for validation tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"

namespace magnetar::test {

struct model_file_builder {
    hparams hp;
    bool with_mtp = false;
    bool mtp_only = false;  // write only the MTP block's tensors (a separate MTP file)
    ggml_type matrix_type = ggml_type::F32;
    // Mutations applied before writing.
    std::function<void(gguf::writer&)> edit_metadata;           // runs after the hparams keys
    std::function<bool(tensor_spec&, ggml_type&)> edit_tensor;  // return false to drop it
    // Value written into every I32 element (hash tables); must be < n_expert to be valid.
    int32_t hash_value = 0;

    // Small shape: the tiny preset with a 512-token vocabulary.
    static model_file_builder micro();

    void write(const std::string& path) const;
};

}  // namespace magnetar::test
