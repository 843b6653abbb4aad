/* A stand-in for a GGML CPU library (libggml-cpu-*.so) with the entry points that
 * `magnetar bench kernels --ggml` loads: F32 with a true dot product, Q8_0 with a wrong one (the
 * bench must refuse a peer that disagrees with it), Q2_K without one (no peer rows). Built
 * twice: FAKE_SCORE 0 is a variant "this CPU cannot run" that a directory load must skip. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef FAKE_SCORE
#define FAKE_SCORE 5
#endif

struct cpu_traits {
    void (*from_float)(const float* x, void* y, int64_t k);
    void (*vec_dot)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by,
                    int nrc);
    int vec_dot_type;
    int64_t nrows;
};

static void copy_f32(const float* x, void* y, int64_t k) { memcpy(y, x, (size_t)k * sizeof(float)); }

static void dot_f32(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by,
                    int nrc) {
    const float* a = (const float*)x;
    const float* b = (const float*)y;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += (double)a[i] * b[i];
    *s = (float)sum;
}

static void wrong_dot(int n, float* s, size_t bs, const void* x, size_t bx, const void* y,
                      size_t by, int nrc) {
    *s = 1000.0f;
}

static void fill_q8_0(const float* x, void* y, int64_t k) { memset(y, 0, (size_t)k / 32 * 34); }

static const struct cpu_traits k_f32 = {copy_f32, dot_f32, 0, 1};
static const struct cpu_traits k_q8_0 = {fill_q8_0, wrong_dot, 8, 1};
static const struct cpu_traits k_q2_k = {0, 0, 15, 1};
static const struct cpu_traits k_none = {0, 0, 0, 1};

const struct cpu_traits* ggml_get_type_traits_cpu(int type) {
    switch (type) {
        case 0: return &k_f32;
        case 8: return &k_q8_0;
        case 10: return &k_q2_k;
        default: return &k_none;
    }
}

const char* ggml_type_name(int type) {
    switch (type) {
        case 0: return "f32";
        case 8: return "q8_0";
        case 10: return "q2_K";
        case 15: return "q8_K";
        default: return "unknown";
    }
}

size_t ggml_row_size(int type, int64_t ne) {
    switch (type) {
        case 0: return (size_t)ne * 4;
        case 8: return (size_t)ne / 32 * 34;
        case 15: return (size_t)ne / 256 * 292;
        default: return 0;
    }
}

void ggml_cpu_init(void) {}

int ggml_backend_score(void) { return FAKE_SCORE; }
