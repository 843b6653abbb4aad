// The backend ops the forward pass of an architecture calls: the engine checks each against
// backend::supports() at load, so a backend that lacks one is refused with the op's name before
// any weight is placed, never in the middle of a forward pass.
//
// Owns: the list per architecture (DeepSeek V4, DeepSeek V4.1). tests/model/required_ops_test.cpp
// runs each tiny model through a recording backend and fails when the forward pass calls an op
// that is not listed here, or when a listed op is never called.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"

namespace magnetar::graph {

std::vector<backend::op_kind> required_ops(const hparams& hp);

}  // namespace magnetar::graph
