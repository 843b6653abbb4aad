#include "engine/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/format.h"
#if MAGNETAR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace magnetar {

std::vector<std::string> built_backends() {
#if MAGNETAR_HAVE_CUDA
    return {"cpu", "cuda"};
#else
    return {"cpu"};
#endif
}

std::unique_ptr<backend::backend> make_backend(const backend_choice& c) {
    if (c.name == "cpu") {
        return std::make_unique<backend::cpu_backend>(c.n_threads, c.reference_kernels,
                                                      c.exact_matmul);
    }
    if (c.name == "cuda") {
#if MAGNETAR_HAVE_CUDA
        if (c.reference_kernels) {
            throw Error(
                "backend cuda: the reference kernels are the CPU backend's (use "
                "--backend cpu for reference runs)");
        }
        if (c.device < 0) throw Error(strfmt("backend cuda: bad device ordinal %d", c.device));
        backend::cuda_options o;
        o.device = c.device;
        o.quiet = c.quiet;
        try {
            // The CUDA matmuls always multiply float activations (exact_matmul's path).
            return backend::make_cuda_backend(o);
        } catch (const Error& e) {
            throw Error(std::string("backend cuda: ") + e.what());
        }
#else
        throw Error(
            "backend cuda: this build of magnetar has no CUDA backend (it is built when "
            "CMake finds nvcc, option MAGNETAR_CUDA)");
#endif
    }
    std::string names;
    for (const std::string& n : built_backends()) names += (names.empty() ? "" : ", ") + n;
    throw Error(strfmt("unknown backend '%s' (this build has: %s)", c.name.c_str(), names.c_str()));
}

}  // namespace magnetar
