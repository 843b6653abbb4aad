// The default model (models/magnetar-tiny.gguf, found upwards from the working directory),
// loaded once per test executable with 2 threads. Null when the file is missing (set-up makes
// it), so that tests can skip with a message.
#pragma once

#include <memory>

#include "core/paths.h"
#include "magnetar/engine.h"

namespace magnetar::test {

inline const Engine* default_engine() {
    static const std::unique_ptr<Engine> engine = [] {
        std::unique_ptr<Engine> e;
        engine_options eo;
        eo.model_path = find_in_ancestors("models/magnetar-tiny.gguf");
        eo.n_threads = 2;
        if (!eo.model_path.empty()) (void)Engine::load(eo, &e);
        return e;
    }();
    return engine.get();
}

}  // namespace magnetar::test

#define MAGNETAR_REQUIRE_DEFAULT_MODEL()                                            \
    do {                                                                            \
        if (!::magnetar::test::default_engine())                                    \
            GTEST_SKIP() << "models/magnetar-tiny.gguf missing (scripts/setup.sh)"; \
    } while (0)
