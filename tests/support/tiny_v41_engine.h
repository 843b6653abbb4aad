// The engine of the tokenized `v41-tiny` model (support/tiny_models.h, lossless weights, 2
// threads), loaded once per test process, for the V4.1 tests that go through text.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "magnetar/engine.h"
#include "support/tiny_models.h"

namespace magnetar::test {

inline const std::string& tiny_v41_model() {
    return tiny_model_with_tokenizer("v41-tiny", "lossless");
}

// Null when tokenizer.json is missing (the tests then skip); a load failure throws.
inline const Engine* tiny_v41_engine() {
    static const std::unique_ptr<Engine> engine = []() -> std::unique_ptr<Engine> {
        std::unique_ptr<Engine> e;
        if (tiny_v41_model().empty()) return e;
        engine_options eo;
        eo.model_path = tiny_v41_model();
        eo.n_threads = 2;
        const status st = Engine::load(eo, &e);
        if (!st.ok()) throw std::runtime_error("loading the tokenized v41-tiny: " + st.message());
        return e;
    }();
    return engine.get();
}

}  // namespace magnetar::test

// Skips the test when the tokenized V4.1 model cannot be made.
#define MAGNETAR_REQUIRE_V41_MODEL()                                     \
    do {                                                                 \
        if (!::magnetar::test::tiny_v41_engine())                        \
            GTEST_SKIP() << "tokenizer.json missing (scripts/setup.sh)"; \
    } while (0)
