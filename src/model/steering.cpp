#include "model/steering.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/format.h"

namespace magnetar {

namespace {

// Unit length within float rounding of a few thousand products.
constexpr double kUnitTolerance = 1e-3;

std::string read_all(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(strfmt("%s %s: %s", what, path.c_str(), std::strerror(errno)));
    std::ostringstream s;
    s << in.rdbuf();
    if (in.bad()) throw Error(strfmt("%s %s: read error", what, path.c_str()));
    return s.str();
}

void write_atomically(const std::string& path, const void* data, size_t n) {
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw Error(strfmt("cannot write %s: %s", tmp.c_str(), std::strerror(errno)));
    const bool ok = std::fwrite(data, 1, n, f) == n;
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw Error(strfmt("cannot write %s: %s", path.c_str(), std::strerror(err)));
    }
}

template <typename T>
T sidecar_field(const nlohmann::json& j, const char* key, const std::string& path, T fallback) {
    if (!j.contains(key)) return fallback;
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(
            strfmt("steering sidecar %s: field \"%s\" has the wrong type", path.c_str(), key));
    }
}

void read_sidecar(const std::string& path, steering_file* f) {
    const std::string text = read_all(path, "steering sidecar");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(strfmt("steering sidecar %s: not JSON (%s)", path.c_str(), e.what()));
    }
    if (!j.is_object()) throw Error("steering sidecar " + path + ": not a JSON object");
    f->has_sidecar = true;
    f->model = sidecar_field<std::string>(j, "model", path, "");
    f->arch = sidecar_field<std::string>(j, "arch", path, "");
    f->component = sidecar_field<std::string>(j, "component", path, "");
    f->layers = sidecar_field<std::vector<uint32_t>>(j, "layers", path, {});
    f->n_target = sidecar_field<int64_t>(j, "n_target", path, 0);
    f->n_control = sidecar_field<int64_t>(j, "n_control", path, 0);
    f->orthogonalized = sidecar_field<bool>(j, "orthogonalized", path, false);
    f->pair_normalized = sidecar_field<bool>(j, "pair_normalized", path, false);
    f->note = sidecar_field<std::string>(j, "note", path, "");
    f->n_layer = sidecar_field<uint32_t>(j, "n_layer", path, f->n_layer);
    f->n_embd = sidecar_field<uint32_t>(j, "n_embd", path, f->n_embd);
}

}  // namespace

std::string steering_sidecar_path(const std::string& path) {
    constexpr std::string_view ext = ".f32";
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
        return path.substr(0, path.size() - ext.size()) + ".json";
    return path + ".json";
}

steering_file read_steering_file(const std::string& path, const hparams& hp,
                                 const std::string& model_name) {
    steering_file f;
    f.n_layer = hp.n_layer;
    f.n_embd = hp.n_embd;
    const std::string side = steering_sidecar_path(path);
    struct stat st {};
    if (::stat(side.c_str(), &st) == 0) {
        read_sidecar(side, &f);
        const std::string arch = hp.is_v41() ? "deepseek41" : "deepseek4";
        if (!f.arch.empty() && f.arch != arch) {
            throw Error(strfmt("steering file %s was built for architecture %s, this model is %s",
                               path.c_str(), f.arch.c_str(), arch.c_str()));
        }
        if (f.n_embd != hp.n_embd || f.n_layer != hp.n_layer) {
            throw Error(strfmt(
                "steering file %s was built for %u layers of width %u, this model has %u of %u",
                path.c_str(), f.n_layer, f.n_embd, hp.n_layer, hp.n_embd));
        }
        if (!f.model.empty() && f.model != model_name) {
            throw Error(
                strfmt("steering file %s was built for the model \"%s\", this one is \"%s\"",
                       path.c_str(), f.model.c_str(), model_name.c_str()));
        }
        for (uint32_t il : f.layers) {
            if (il >= hp.n_layer) {
                throw Error(strfmt("steering sidecar %s lists layer %u of a %u-layer model",
                                   side.c_str(), il, hp.n_layer));
            }
        }
        if (!f.component.empty() && f.component != "ffn_out" && f.component != "attn_out") {
            throw Error(
                strfmt("steering sidecar %s: component \"%s\" (expected ffn_out or attn_out)",
                       side.c_str(), f.component.c_str()));
        }
    }

    const std::string bytes = read_all(path, "steering file");
    const uint64_t want = static_cast<uint64_t>(hp.n_layer) * hp.n_embd * sizeof(float);
    if (bytes.size() != want) {
        std::string got = strfmt("%zu bytes", bytes.size());
        if (bytes.size() % sizeof(float) == 0 && hp.n_embd > 0 &&
            bytes.size() % (static_cast<uint64_t>(hp.n_embd) * sizeof(float)) != 0)
            got += strfmt(", not a multiple of the width %u", hp.n_embd);
        throw Error(strfmt("steering file %s: expected %llu bytes (%u layers x %u F32), got %s",
                           path.c_str(), static_cast<unsigned long long>(want), hp.n_layer,
                           hp.n_embd, got.c_str()));
    }
    f.directions.resize(static_cast<size_t>(hp.n_layer) * hp.n_embd);
    std::memcpy(f.directions.data(), bytes.data(), bytes.size());
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const float* v = f.direction(il);
        double norm2 = 0.0;
        for (uint32_t i = 0; i < hp.n_embd; ++i) {
            if (!std::isfinite(v[i])) {
                throw Error(strfmt("steering file %s: layer %u has a non-finite value at %u",
                                   path.c_str(), il, i));
            }
            norm2 += static_cast<double>(v[i]) * v[i];
        }
        if (norm2 != 0.0 && std::fabs(std::sqrt(norm2) - 1.0) > kUnitTolerance) {
            throw Error(
                strfmt("steering file %s: layer %u's direction has length %.6g; "
                       "directions must be unit vectors (or all zero: not steered)",
                       path.c_str(), il, std::sqrt(norm2)));
        }
    }
    return f;
}

void write_steering_file(const std::string& path, const steering_file& f) {
    MAGNETAR_ASSERT(f.directions.size() == static_cast<size_t>(f.n_layer) * f.n_embd,
                    "steering file: directions do not match n_layer x n_embd");
    nlohmann::json j;
    j["format"] = "magnetar-steering";
    j["version"] = 1;
    j["model"] = f.model;
    j["arch"] = f.arch;
    j["n_layer"] = f.n_layer;
    j["n_embd"] = f.n_embd;
    j["component"] = f.component;
    j["layers"] = f.layers;
    j["n_target"] = f.n_target;
    j["n_control"] = f.n_control;
    j["orthogonalized"] = f.orthogonalized;
    j["pair_normalized"] = f.pair_normalized;
    if (!f.note.empty()) j["note"] = f.note;
    const std::string side = j.dump(2) + "\n";
    write_atomically(path, f.directions.data(), f.directions.size() * sizeof(float));
    write_atomically(steering_sidecar_path(path), side.data(), side.size());
}

uint64_t steering_fingerprint(const steering_file& f) {
    uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(f.directions.data());
    for (size_t i = 0; i < f.directions.size() * sizeof(float); ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace magnetar
