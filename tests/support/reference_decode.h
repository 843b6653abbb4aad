// Reference decoding loops of the front-end tests, written out over the public Session API
// and independent of src/sampling: greedy with the repetition penalties applied by their rules
// (docs/sampling.md, "Repetition penalties") in double precision.
#pragma once

#include <cstdint>
#include <vector>

#include "magnetar/engine.h"

namespace magnetar::test {

struct penalties {
    double repeat = 1.0;     // divides a positive logit, multiplies a negative one
    double presence = 0.0;   // subtracted once per distinct token in the window
    double frequency = 0.0;  // subtracted per occurrence in the window
    int64_t last_n = 64;     // the window: the last N generated tokens; -1: all
};

// Up to `n` tokens after `prompt` (stops before EOS), each the first maximum of the logits
// after the penalties over the tokens generated so far (the prompt is not in the window).
std::vector<int32_t> penalised_greedy(const Engine& e, const std::vector<int32_t>& prompt,
                                      int64_t n, int64_t n_ctx, const penalties& pen);

}  // namespace magnetar::test
