#include "backend/cpu/ref/matmul_ref.h"

#include "backend/cpu/kernels.h"

namespace magnetar::cpu::ref {

void matmul_ref(const tensor& w, const tensor& x, const tensor& y, int64_t r0, int64_t r1,
                float* scratch) {
    const int64_t n_in = w.ne[0];
    for (int64_t o = r0; o < r1; ++o) {
        dequant_row(w, o, scratch);
        for (int64_t t = 0; t < x.ne[1]; ++t) {
            const float* xt = x.f32_row(t);
            float s = 0.0f;
            for (int64_t i = 0; i < n_in; ++i) s += scratch[i] * xt[i];
            y.f32_row(t)[o] = s;
        }
    }
}

}  // namespace magnetar::cpu::ref
