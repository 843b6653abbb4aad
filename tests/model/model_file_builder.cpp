#include "model/model_file_builder.h"

#include <cstring>

namespace magnetar::test {

model_file_builder model_file_builder::micro() {
    model_file_builder b;
    b.hp = preset_tiny();
    b.hp.n_vocab = 512;
    return b;
}

void model_file_builder::write(const std::string& path) const {
    gguf::writer w(path);
    write_hparams(w, hp);
    if (edit_metadata) edit_metadata(w);
    std::vector<tensor_spec> specs = mtp_only ? mtp_catalogue(hp) : tensor_catalogue(hp, with_mtp);
    std::vector<std::pair<tensor_spec, ggml_type>> keep;
    for (tensor_spec s : specs) {
        ggml_type t = ggml_type::F32;
        if (s.dtype == dtype_class::i32)
            t = ggml_type::I32;
        else if (s.dtype == dtype_class::matrix || s.dtype == dtype_class::routed_expert)
            t = matrix_type;
        if (edit_tensor && !edit_tensor(s, t)) continue;
        keep.emplace_back(s, t);
    }
    for (const auto& [s, t] : keep) w.add_tensor(s.name, t, s.ne);
    for (const auto& [s, t] : keep) {
        uint64_t n = 1;
        for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
        const uint64_t bytes = *type_bytes(t, n);
        std::vector<uint8_t> buf(bytes, 0);
        if (t == ggml_type::I32) {
            for (uint64_t i = 0; i < n; ++i) std::memcpy(buf.data() + 4 * i, &hash_value, 4);
        }
        w.write_tensor_data(buf.data(), buf.size());
    }
    w.finish();
}

}  // namespace magnetar::test
