// Size accounting of a model file: bytes and parameters by tensor role and by layer.
// Used by `magnetar inspect` and by the benchmarks' weight-bytes-per-token figures.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "model/catalogue.h"
#include "model/model.h"

namespace magnetar {

struct size_stats {
    uint64_t total_bytes = 0;   // all tensor bytes of the catalogue (main file + MTP)
    uint64_t total_params = 0;  // elements
    std::map<tensor_role, uint64_t> bytes_by_role;
    std::map<tensor_role, uint64_t> params_by_role;
    std::vector<uint64_t> bytes_by_layer;  // main layers 0..n_layer-1
    uint64_t mtp_bytes = 0;                // the MTP block (V4.1: the DSpark stages)
    uint64_t global_bytes = 0;             // embeddings, head, output HC and norm

    // The three-way split of spec §3.4: routed experts, embeddings + head, everything else.
    uint64_t routed_expert_bytes() const;
    uint64_t embedding_bytes() const;
    uint64_t dense_bytes() const { return total_bytes - routed_expert_bytes() - embedding_bytes(); }
};

size_stats compute_size_stats(const model& m);

}  // namespace magnetar
