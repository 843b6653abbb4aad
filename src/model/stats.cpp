#include "model/stats.h"

namespace magnetar {

uint64_t size_stats::routed_expert_bytes() const {
    auto it = bytes_by_role.find(tensor_role::routed_expert);
    return it == bytes_by_role.end() ? 0 : it->second;
}

uint64_t size_stats::embedding_bytes() const {
    uint64_t n = 0;
    for (tensor_role r : {tensor_role::embedding, tensor_role::output_head}) {
        auto it = bytes_by_role.find(r);
        if (it != bytes_by_role.end()) n += it->second;
    }
    return n;
}

size_stats compute_size_stats(const model& m) {
    const hparams& hp = m.hp();
    size_stats st;
    st.bytes_by_layer.assign(hp.n_layer, 0);
    const bool with_mtp = m.has_draft();
    for (const tensor_spec& spec : tensor_catalogue(hp, with_mtp)) {
        const gguf::reader& src =
            spec.layer == static_cast<int32_t>(hp.n_layer) ? *m.mtp_file() : m.file();
        const gguf::tensor_info* t = src.find_tensor(spec.name);
        if (!t) continue;  // optional and absent
        const uint64_t bytes = t->n_bytes;
        const auto params = static_cast<uint64_t>(t->n_elements());
        st.total_bytes += bytes;
        if (spec.role != tensor_role::hash_table)
            st.total_params += params;  // lookup tables, not weights
        st.bytes_by_role[spec.role] += bytes;
        st.params_by_role[spec.role] += params;
        if (spec.layer < 0) {
            st.global_bytes += bytes;
        } else if (spec.layer < static_cast<int32_t>(hp.n_layer)) {
            st.bytes_by_layer[static_cast<size_t>(spec.layer)] += bytes;
        } else {
            st.mtp_bytes += bytes;
        }
    }
    return st;
}

}  // namespace magnetar
