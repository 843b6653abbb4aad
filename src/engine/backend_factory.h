// Internal to src/engine: the one place a compute backend is chosen by name (engine_options::
// backend). Only this file knows which backends the build contains.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace magnetar {

struct backend_choice {
    std::string name = "cpu";  // "cpu" or "cuda"
    int device = 0;            // GPU ordinal
    int n_threads = 1;         // CPU threads
    bool reference_kernels = false;
    bool exact_matmul = false;
    bool quiet = false;
};

// The backends this build contains, in the order help texts list them.
std::vector<std::string> built_backends();

// Throws magnetar::Error with one line that says why (unknown name, backend not in this build,
// no usable device, an option the backend does not have).
std::unique_ptr<backend::backend> make_backend(const backend_choice& c);

}  // namespace magnetar
