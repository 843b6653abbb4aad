// Shared helpers of the DeepSeek V4.1 model-layer tests (v41_model_test.cpp and
// v41_catalogue_test.cpp): a writer of small V4.1 files from the tensor catalogue with hooks to
// break one thing, and EXPECT_CONTAINS for error messages.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/types.h"
#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"

#define EXPECT_CONTAINS(hay, needle) \
    EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

namespace magnetar::test {

// Writes small V4.1 files from the catalogue (zero-filled tensors), with hooks to break one thing.
struct v41_builder {
    hparams hp = preset_v41_tiny();
    bool with_dspark = true;
    std::function<void(gguf::writer&)> edit_metadata;
    std::function<bool(tensor_spec&, ggml_type&)> edit_tensor;  // false: drop the tensor

    static ggml_type default_type(const tensor_spec& s) {
        switch (s.dtype) {
            case dtype_class::dense:
            case dtype_class::float_any:
            case dtype_class::matrix:
                return ggml_type::BF16;
            case dtype_class::routed_expert_v41:
                return ggml_type::MXFP4;
            case dtype_class::engram_table:
                return ggml_type::I8;
            default:
                return ggml_type::F32;
        }
    }

    void write(const std::string& path, bool tensors = true) const {
        gguf::writer w(path);
        write_hparams(w, hp);
        if (edit_metadata) edit_metadata(w);
        std::vector<std::pair<tensor_spec, ggml_type>> keep;
        if (tensors) {
            for (tensor_spec s : tensor_catalogue(hp, with_dspark)) {
                ggml_type t = default_type(s);
                if (edit_tensor && !edit_tensor(s, t)) continue;
                keep.emplace_back(s, t);
            }
        }
        for (const auto& [s, t] : keep) w.add_tensor(s.name, t, s.ne);
        for (const auto& [s, t] : keep) {
            uint64_t n = 1;
            for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
            std::vector<uint8_t> buf(*type_bytes(t, n), 0);
            w.write_tensor_data(buf.data(), buf.size());
        }
        w.finish();
    }
};

}  // namespace magnetar::test
