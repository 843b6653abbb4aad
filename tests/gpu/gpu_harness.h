// Test support of tests/gpu: the CUDA backend against the CPU backend.
//
// Every test starts with MAGNETAR_REQUIRE_CUDA(), which skips it with "no CUDA device: <why>"
// on machines without a usable GPU (CI builds and lists these tests, and they pass as skipped).
// A `twin` is one logical tensor held by both backends: host bytes for the CPU backend and a
// device buffer (activations) or a mapped host region (weights) for the CUDA backend, so each
// op runs on identical inputs. Comparisons report normalised MSE; NaN always fails.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace magnetar::gpu_test {

#define MAGNETAR_REQUIRE_CUDA()                                   \
    do {                                                          \
        std::string why_;                                         \
        if (!::magnetar::backend::cuda_device_available(&why_)) { \
            GTEST_SKIP() << "no CUDA device: " << why_;           \
        }                                                         \
    } while (0)

struct twin {
    std::shared_ptr<std::vector<uint8_t>> host;  // CPU copy (and the mapped source of weights)
    tensor c;                                    // over host
    tensor g;                                    // over device memory or the mapped region
};

class harness {
  public:
    harness();
    ~harness();

    backend::cpu_backend& cpu() { return *cpu_; }
    backend::cuda_backend& gpu() { return *gpu_; }

    // Activations / state (device buffer on the GPU side), zero-filled.
    twin zeros(ggml_type type, int64_t ne0, int64_t ne1 = 1);
    twin f32(const std::vector<float>& v, int64_t ne0, int64_t ne1 = 1);
    twin i32(const std::vector<int32_t>& v, int64_t ne0, int64_t ne1 = 1);
    // Uniform in [-scale, scale).
    twin random(Rng& rng, int64_t ne0, int64_t ne1, float scale);
    // Weights [n_in, n_out, n_exp] of a stored type with random contents, mapped into the GPU
    // backend through its upload table (map_host_region).
    twin weight(ggml_type type, Rng& rng, int64_t n_in, int64_t n_out, int64_t n_exp = 1,
                float rms = 0.05f);
    // A float weight from given values (mapped like weight()).
    twin weight_f32(const std::vector<float>& v, int64_t ne0, int64_t ne1 = 1);

    // Copies the host inputs to both sides again (after an in-place op, to reuse a twin).
    void reset(const twin& t);
    std::vector<float> cpu_f32(const twin& t);
    std::vector<float> gpu_f32(const twin& t);
    std::vector<int32_t> cpu_i32(const twin& t);
    std::vector<int32_t> gpu_i32(const twin& t);

    void limits(int64_t max_row, int64_t max_keys, int64_t max_index_rows);

  private:
    std::unique_ptr<backend::cpu_backend> cpu_;
    std::unique_ptr<backend::cuda_backend> gpu_;
    std::vector<void*> device_buffers_;
    // Host bytes of mapped weights stay alive (and so unique) until the backend is gone.
    std::vector<std::shared_ptr<std::vector<uint8_t>>> mapped_;
};

// sum (a - b)^2 / sum b^2; infinity on NaN or a size mismatch.
double nmse(const std::vector<float>& got, const std::vector<float>& ref);
size_t count_diff(const std::vector<float>& got, const std::vector<float>& ref);

// Expects NMSE <= tol (bit equality when tol == 0) of the GPU result against the CPU one.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                  const std::string& what);

}  // namespace magnetar::gpu_test
