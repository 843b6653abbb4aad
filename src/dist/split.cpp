#include "dist/split.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/format.h"

namespace magnetar::dist {

weight_map layer_weight_bytes(const model& m) {
    const hparams& hp = m.hp();
    weight_map w;
    w.layers.assign(hp.n_layer, 0);
    auto add = [&](const gguf::tensor_info& t) {
        unsigned il = 0;
        if (std::sscanf(t.name.c_str(), "blk.%u.", &il) == 1 && il < hp.n_layer) {
            w.layers[il] += t.n_bytes;
        } else if (t.name.rfind("token_embd", 0) == 0) {
            w.first += t.n_bytes;
        } else {
            w.last += t.n_bytes;  // output head, MTP block and anything global
        }
    };
    for (const gguf::tensor_info& t : m.file().tensors()) add(t);
    if (m.mtp_file() != &m.file()) {
        for (const gguf::tensor_info& t : m.mtp_file()->tensors()) w.last += t.n_bytes;
    }
    return w;
}

uint64_t stage_bytes(const weight_map& w, layer_range r, uint32_t n_layer) {
    uint64_t b = 0;
    for (uint32_t il = r.first; il < r.second && il < w.layers.size(); ++il) b += w.layers[il];
    if (r.first == 0) b += w.first;
    if (r.second == n_layer) b += w.last;
    return b;
}

std::string format_split(const std::vector<layer_range>& split) {
    std::string s;
    for (const layer_range& r : split)
        s += strfmt("%s%u:%u", s.empty() ? "" : ",", r.first, r.second);
    return s;
}

namespace {

std::vector<layer_range> split_auto(int n_stages, const weight_map& w) {
    const uint32_t n_layer = static_cast<uint32_t>(w.layers.size());
    // Cumulative bytes at each layer boundary, the embedding counted before layer 0 and the
    // head after the last layer; each cut goes to the boundary nearest its equal share,
    // leaving at least one layer to every stage.
    std::vector<double> cum(n_layer + 1, 0.0);
    cum[0] = static_cast<double>(w.first);
    for (uint32_t il = 0; il < n_layer; ++il)
        cum[il + 1] = cum[il] + static_cast<double>(w.layers[il]);
    const double total = cum[n_layer] + static_cast<double>(w.last);
    std::vector<layer_range> out;
    uint32_t begin = 0;
    for (int s = 0; s < n_stages; ++s) {
        const uint32_t stages_left = static_cast<uint32_t>(n_stages - s);
        if (stages_left == 1) {
            out.push_back({begin, n_layer});
            break;
        }
        const double target = total * (s + 1) / n_stages;
        const uint32_t lo = begin + 1;
        const uint32_t hi = n_layer - (stages_left - 1);
        uint32_t best = lo;
        for (uint32_t b = lo; b <= hi; ++b) {
            if (std::abs(cum[b] - target) < std::abs(cum[best] - target)) best = b;
        }
        out.push_back({begin, best});
        begin = best;
    }
    return out;
}

}  // namespace

std::vector<layer_range> split_layers(const std::string& spec, int n_stages, const weight_map& w) {
    const uint32_t n_layer = static_cast<uint32_t>(w.layers.size());
    if (n_stages < 1) throw Error("--layers: no stages");
    if (static_cast<uint32_t>(n_stages) > n_layer) {
        throw Error(
            strfmt("--layers: %d pipeline stages for a model of %u layers (each stage "
                   "needs at least one layer)",
                   n_stages, n_layer));
    }
    if (spec.empty() || spec == "auto") return split_auto(n_stages, w);
    std::vector<layer_range> out;
    std::stringstream ss(spec);
    std::string item;
    uint32_t next = 0;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const size_t colon = item.find(':');
        layer_range r;
        if (colon == std::string::npos) {
            const long count = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || count < 1)
                throw Error(
                    strfmt("--layers: '%s' is not a layer count or a range a:b", item.c_str()));
            r = {next, next + static_cast<uint32_t>(count)};
        } else {
            const std::string a = item.substr(0, colon), b = item.substr(colon + 1);
            const long la = std::strtol(a.c_str(), &end, 10);
            const bool ok_a = !a.empty() && *end == '\0';
            const long lb = std::strtol(b.c_str(), &end, 10);
            const bool ok_b = !b.empty() && *end == '\0';
            if (!ok_a || !ok_b || la < 0 || lb <= la)
                throw Error(strfmt("--layers: '%s' is not a range a:b with a < b", item.c_str()));
            r = {static_cast<uint32_t>(la), static_cast<uint32_t>(lb)};
        }
        if (r.first != next)
            throw Error(
                strfmt("--layers: stage %zu starts at layer %u, expected %u (ranges must be "
                       "contiguous from 0)",
                       out.size(), r.first, next));
        if (r.second > n_layer)
            throw Error(strfmt("--layers: stage %zu ends at layer %u, the model has %u layers",
                               out.size(), r.second, n_layer));
        out.push_back(r);
        next = r.second;
    }
    if (static_cast<int>(out.size()) != n_stages)
        throw Error(
            strfmt("--layers: %zu stages given, the job has %d ranks", out.size(), n_stages));
    if (next != n_layer)
        throw Error(
            strfmt("--layers: the stages cover layers 0..%u, the model has %u", next, n_layer));
    return out;
}

namespace {

void hash_prefix(EVP_MD_CTX* ctx, const std::string& path, uint64_t n) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) throw Error(strfmt("%s: cannot open for the model fingerprint", path.c_str()));
    std::vector<unsigned char> buf(1 << 16);
    while (n > 0) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
        const size_t got = std::fread(buf.data(), 1, want, f.get());
        if (got != want)
            throw Error(strfmt("%s: short read for the model fingerprint", path.c_str()));
        EVP_DigestUpdate(ctx, buf.data(), got);
        n -= got;
    }
}

}  // namespace

std::string model_fingerprint(const std::string& path, uint64_t data_offset,
                              const std::string& mtp_path, uint64_t mtp_data_offset) {
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
    hash_prefix(ctx.get(), path, data_offset);
    if (!mtp_path.empty()) hash_prefix(ctx.get(), mtp_path, mtp_data_offset);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &len);
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) hex += strfmt("%02x", md[i]);
    return hex;
}

}  // namespace magnetar::dist
