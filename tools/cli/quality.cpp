// Reference files and divergence statistics of `magnetar score` (quality.h).
#include "cli/quality.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "core/format.h"

namespace magnetar::cli {

namespace {

constexpr char kMagic[8] = {'M', 'G', 'Q', 'R', 'E', 'F', '0', '1'};
constexpr uint32_t kMaxTopK = 4096;
constexpr uint32_t kMaxName = 4096;

using file_ptr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

file_ptr open_file(const std::string& path, const char* mode) {
    std::FILE* f = std::fopen(path.c_str(), mode);
    if (!f) {
        throw Error(strfmt("%s: cannot %s", path.c_str(), mode[0] == 'r' ? "open" : "create"));
    }
    return file_ptr(f, std::fclose);
}

class writer {
  public:
    writer(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
    template <typename T>
    void put(const T* data, size_t n) {
        static_assert(std::endian::native == std::endian::little);
        if (n > 0 && std::fwrite(data, sizeof(T), n, f_) != n) {
            throw Error(strfmt("%s: write failed", path_.c_str()));
        }
    }
    void u32(uint32_t v) { put(&v, 1); }

  private:
    std::FILE* f_;
    const std::string& path_;
};

class reader {
  public:
    reader(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
    template <typename T>
    void get(T* data, size_t n) {
        if (n > 0 && std::fread(data, sizeof(T), n, f_) != n) {
            throw Error(strfmt("%s: truncated reference file", path_.c_str()));
        }
    }
    uint32_t u32() {
        uint32_t v = 0;
        get(&v, 1);
        return v;
    }

  private:
    std::FILE* f_;
    const std::string& path_;
};

// Bytes of one chunk record.
uint64_t chunk_bytes(const ref_file& r) {
    const uint64_t pos = static_cast<uint64_t>(r.top_k) * 8 + 8;
    return static_cast<uint64_t>(r.n_ctx) * 4 + (r.n_ctx - 1) * pos +
           static_cast<uint64_t>(r.greedy_tokens) * 4;
}

}  // namespace

void write_ref(const std::string& path, const ref_file& r) {
    const std::string tmp = path + ".tmp";
    {
        file_ptr f = open_file(tmp, "wb");
        writer w(f.get(), tmp);
        w.put(kMagic, sizeof kMagic);
        for (uint32_t v :
             {r.n_vocab, r.top_k, r.n_ctx, r.greedy_prompt, r.greedy_tokens,
              static_cast<uint32_t>(r.chunks.size()), static_cast<uint32_t>(r.model.size())}) {
            w.u32(v);
        }
        w.put(r.model.data(), r.model.size());
        for (const ref_chunk& c : r.chunks) {
            MAGNETAR_ASSERT(c.tokens.size() == r.n_ctx && c.positions.size() == r.n_ctx - 1 &&
                                c.greedy.size() == r.greedy_tokens,
                            "a reference chunk of the header's shape");
            w.put(c.tokens.data(), c.tokens.size());
            for (const ref_position& p : c.positions) {
                w.put(p.ids.data(), p.ids.size());
                w.put(p.logp.data(), p.logp.size());
                w.put(&p.rest, 1);
                w.put(&p.target, 1);
            }
            w.put(c.greedy.data(), c.greedy.size());
        }
        if (std::fflush(f.get()) != 0 || std::ferror(f.get())) {
            throw Error(strfmt("%s: write failed", tmp.c_str()));
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw Error(strfmt("%s: cannot rename into place", path.c_str()));
    }
}

ref_file read_ref(const std::string& path) {
    file_ptr f = open_file(path, "rb");
    reader rd(f.get(), path);
    char magic[8] = {};
    rd.get(magic, sizeof magic);
    if (std::memcmp(magic, kMagic, sizeof magic) != 0) {
        throw Error(strfmt("%s: not a magnetar score reference file (bad magic)", path.c_str()));
    }
    ref_file r;
    r.n_vocab = rd.u32();
    r.top_k = rd.u32();
    r.n_ctx = rd.u32();
    r.greedy_prompt = rd.u32();
    r.greedy_tokens = rd.u32();
    const uint32_t n_chunks = rd.u32();
    const uint32_t name_len = rd.u32();
    if (r.n_vocab == 0 || r.top_k == 0 || r.top_k > kMaxTopK || r.top_k > r.n_vocab ||
        r.n_ctx < 2 || name_len > kMaxName || r.greedy_prompt >= r.n_ctx) {
        throw Error(strfmt("%s: inconsistent header (vocab %u, top-k %u, ctx %u, greedy prompt %u)",
                           path.c_str(), r.n_vocab, r.top_k, r.n_ctx, r.greedy_prompt));
    }
    r.model.resize(name_len);
    rd.get(r.model.data(), name_len);
    // The size must be exact: a truncated or padded file is an error, not a shorter sample.
    const long here = std::ftell(f.get());
    if (std::fseek(f.get(), 0, SEEK_END) != 0) throw Error(strfmt("%s: seek failed", path.c_str()));
    const uint64_t size = static_cast<uint64_t>(std::ftell(f.get()));
    const uint64_t want = static_cast<uint64_t>(here) + n_chunks * chunk_bytes(r);
    if (size != want) {
        throw Error(strfmt("%s: %llu bytes, the header describes %llu (truncated or damaged)",
                           path.c_str(), static_cast<unsigned long long>(size),
                           static_cast<unsigned long long>(want)));
    }
    std::fseek(f.get(), here, SEEK_SET);
    auto check_id = [&](int32_t id) {
        if (id < 0 || static_cast<uint32_t>(id) >= r.n_vocab) {
            throw Error(strfmt("%s: token id %d outside the vocabulary of %u", path.c_str(), id,
                               r.n_vocab));
        }
    };
    r.chunks.resize(n_chunks);
    for (ref_chunk& c : r.chunks) {
        c.tokens.resize(r.n_ctx);
        rd.get(c.tokens.data(), c.tokens.size());
        for (int32_t id : c.tokens) check_id(id);
        c.positions.resize(r.n_ctx - 1);
        for (ref_position& p : c.positions) {
            p.ids.resize(r.top_k);
            p.logp.resize(r.top_k);
            rd.get(p.ids.data(), p.ids.size());
            rd.get(p.logp.data(), p.logp.size());
            rd.get(&p.rest, 1);
            rd.get(&p.target, 1);
            for (int32_t id : p.ids) check_id(id);
        }
        c.greedy.resize(r.greedy_tokens);
        rd.get(c.greedy.data(), c.greedy.size());
        for (int32_t id : c.greedy) check_id(id);
    }
    return r;
}

namespace {

// max and log(sum exp(l - max)) of a logit row, in double.
struct log_norm {
    double max = 0;
    double log_sum = 0;
    double lse() const { return max + log_sum; }
};

log_norm normaliser(std::span<const float> logits) {
    log_norm n;
    n.max = *std::max_element(logits.begin(), logits.end());
    double s = 0;
    for (float l : logits) s += std::exp(static_cast<double>(l) - n.max);
    n.log_sum = std::log(s);
    return n;
}

}  // namespace

double token_logprob(std::span<const float> logits, int32_t id) {
    return static_cast<double>(logits[static_cast<size_t>(id)]) - normaliser(logits).lse();
}

int32_t argmax_of(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

ref_position summarise(std::span<const float> logits, uint32_t top_k, int32_t target) {
    const log_norm n = normaliser(logits);
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    // Descending logit, ties towards the lower id.
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ref_position p;
    for (uint32_t i = 0; i < top_k; ++i) {
        const double lp = static_cast<double>(logits[order[i]]) - n.lse();
        p.ids.push_back(order[i]);
        p.logp.push_back(static_cast<float>(lp));
    }
    // log(1 - top) = log(sum of the others) - log(sum of all), summed directly so that a small
    // remainder keeps its precision.
    double rest = 0;
    std::vector<bool> in_top(logits.size(), false);
    for (uint32_t i = 0; i < top_k; ++i) in_top[order[i]] = true;
    for (size_t j = 0; j < logits.size(); ++j) {
        if (!in_top[j]) rest += std::exp(static_cast<double>(logits[j]) - n.max);
    }
    p.rest = rest > 0 ? static_cast<float>(std::log(rest) - n.log_sum)
                      : -std::numeric_limits<float>::infinity();
    p.target = static_cast<float>(static_cast<double>(logits[target]) - n.lse());
    return p;
}

position_score score_position(const ref_position& ref, std::span<const float> logits,
                              int32_t target) {
    const log_norm n = normaliser(logits);
    position_score s;
    double top_mass = 0;
    for (size_t i = 0; i < ref.ids.size(); ++i) {
        const double q = static_cast<double>(logits[ref.ids[i]]) - n.lse();
        const double p = static_cast<double>(ref.logp[i]);
        s.kld += std::exp(p) * (p - q);
        top_mass += std::exp(static_cast<double>(logits[ref.ids[i]]) - n.max);
    }
    if (std::isfinite(ref.rest)) {
        // The model's mass outside the reference's top K; floored so that a model that puts
        // (numerically) nothing there gets a large, finite divergence.
        const double others = std::max(std::exp(n.log_sum) - top_mass, 0.0);
        const double q_rest = std::log(std::max(others, 1e-300)) - n.log_sum;
        const double p_rest = static_cast<double>(ref.rest);
        s.kld += std::exp(p_rest) * (p_rest - q_rest);
    }
    s.kld = std::max(s.kld, 0.0);  // rounding can leave a tiny negative sum
    s.nll = -(static_cast<double>(logits[target]) - n.lse());
    s.top1 = argmax_of(logits) == ref.ids[0];
    return s;
}

distribution describe(std::vector<double> values) {
    distribution d;
    if (values.empty()) return d;
    std::sort(values.begin(), values.end());
    d.mean =
        std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
    auto at = [&](double q) {
        const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size()))) - 1;
        return values[std::min(i, values.size() - 1)];
    };
    d.median = at(0.5);
    d.p99 = at(0.99);
    d.max = values.back();
    return d;
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace magnetar::cli
