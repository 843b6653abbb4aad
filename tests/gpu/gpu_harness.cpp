#include "gpu/gpu_harness.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "quant/random_fill.h"

namespace magnetar::gpu_test {

harness::harness() {
    cpu_ = std::make_unique<backend::cpu_backend>(2, false, /*exact=*/true);
    backend::cuda_options o;
    o.quiet = true;
    gpu_ = backend::make_cuda_backend(o);
    limits(1 << 14, 4096, 4096);
}

harness::~harness() {
    gpu_->synchronize();
    for (void* p : device_buffers_) gpu_->free_buffer(p);
}

void harness::limits(int64_t max_row, int64_t max_keys, int64_t max_index_rows) {
    backend::limits l;
    l.max_row = max_row;
    l.max_keys = max_keys;
    l.max_index_rows = max_index_rows;
    cpu_->reserve(l);
    gpu_->reserve(l);
}

twin harness::zeros(ggml_type type, int64_t ne0, int64_t ne1) {
    twin t;
    const size_t bytes = tensor_bytes(type, ne0, ne1);
    t.host = std::make_shared<std::vector<uint8_t>>(bytes, 0);
    t.c = make_tensor(t.host->data(), type, ne0, ne1);
    void* d = gpu_->alloc_buffer(bytes);
    device_buffers_.push_back(d);
    t.g = make_tensor(d, type, ne0, ne1);
    gpu_->upload(t.g, t.host->data());
    return t;
}

twin harness::f32(const std::vector<float>& v, int64_t ne0, int64_t ne1) {
    twin t = zeros(ggml_type::F32, ne0, ne1);
    std::memcpy(t.host->data(), v.data(), t.host->size());
    reset(t);
    return t;
}

twin harness::i32(const std::vector<int32_t>& v, int64_t ne0, int64_t ne1) {
    twin t = zeros(ggml_type::I32, ne0, ne1);
    std::memcpy(t.host->data(), v.data(), t.host->size());
    reset(t);
    return t;
}

twin harness::random(Rng& rng, int64_t ne0, int64_t ne1, float scale) {
    std::vector<float> v(static_cast<size_t>(ne0 * ne1));
    for (float& x : v) x = rng.uniform_pm1() * scale;
    return f32(v, ne0, ne1);
}

twin harness::weight(ggml_type type, Rng& rng, int64_t n_in, int64_t n_out, int64_t n_exp,
                     float rms) {
    twin t;
    const size_t rb = row_bytes(type, n_in);
    t.host = std::make_shared<std::vector<uint8_t>>(rb * static_cast<size_t>(n_out * n_exp));
    for (int64_t r = 0; r < n_out * n_exp; ++r)
        fill_random_row(type, rng, rms, t.host->data() + static_cast<size_t>(r) * rb, n_in);
    t.c = make_tensor(t.host->data(), type, n_in, n_out, n_exp);
    t.g = t.c;
    gpu_->map_host_region(t.host->data(), t.host->size(), "test weight");
    mapped_.push_back(t.host);
    return t;
}

twin harness::weight_f32(const std::vector<float>& v, int64_t ne0, int64_t ne1) {
    twin t;
    t.host = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(t.host->data(), v.data(), t.host->size());
    t.c = make_tensor(t.host->data(), ggml_type::F32, ne0, ne1);
    t.g = t.c;
    gpu_->map_host_region(t.host->data(), t.host->size(), "test weight");
    mapped_.push_back(t.host);
    return t;
}

void harness::reset(const twin& t) {
    gpu_->upload(t.g, t.host->data());
}

std::vector<float> harness::cpu_f32(const twin& t) {
    std::vector<float> v(static_cast<size_t>(t.c.n_elements()));
    std::memcpy(v.data(), t.c.data, v.size() * 4);
    return v;
}

std::vector<float> harness::gpu_f32(const twin& t) {
    std::vector<float> v(static_cast<size_t>(t.g.n_elements()));
    gpu_->download(t.g, v.data());
    return v;
}

std::vector<int32_t> harness::cpu_i32(const twin& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.c.n_elements()));
    std::memcpy(v.data(), t.c.data, v.size() * 4);
    return v;
}

std::vector<int32_t> harness::gpu_i32(const twin& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.g.n_elements()));
    gpu_->download(t.g, v.data());
    return v;
}

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
    if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (std::isnan(got[i]) || std::isnan(ref[i]))
            return std::numeric_limits<double>::infinity();
        const double e = static_cast<double>(got[i]) - ref[i];
        num += e * e;
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return den > 0 ? num / den : num;
}

size_t count_diff(const std::vector<float>& got, const std::vector<float>& ref) {
    size_t n = 0;
    for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
        if (std::memcmp(&got[i], &ref[i], 4) != 0) ++n;
    }
    return n + (got.size() > ref.size() ? got.size() - ref.size() : ref.size() - got.size());
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                  const std::string& what) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    ASSERT_FALSE(cpu.empty()) << what;
    const double e = nmse(gpu, cpu);
    if (tol == 0.0) {
        EXPECT_EQ(count_diff(gpu, cpu), 0u) << what << ": not bit-identical (nmse " << e << ")";
    } else {
        EXPECT_LE(e, tol) << what << ": " << count_diff(gpu, cpu) << " of " << cpu.size()
                          << " values differ";
    }
}

}  // namespace magnetar::gpu_test
