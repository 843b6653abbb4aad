#include "quantize/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"

namespace magnetar::imatrix {

namespace {

constexpr const char* kSum2 = ".in_sum2";
constexpr const char* kCounts = ".counts";
constexpr const char* kSum = ".in_sum";  // newer llama.cpp: plain sums (statistics only)
constexpr int64_t kExactF32 = int64_t{1} << 24;

bool strip_suffix(std::string& s, const char* sfx) {
    const size_t n = std::strlen(sfx);
    if (s.size() <= n || s.compare(s.size() - n, n, sfx) != 0) return false;
    s.resize(s.size() - n);
    return true;
}

// GGML's legacy format: int32 entry count, then per entry: int32 name length, name, int32
// ncall, int32 nval, nval floats (mean squares times ncall); then optionally int32 chunks and
// the dataset name (int32 length, bytes).
data read_legacy(const std::string& path, uint32_t chunk) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open imatrix file " + path);
    auto read_i32 = [&](const char* what) {
        int32_t v = 0;
        if (!f.read(reinterpret_cast<char*>(&v), 4))
            throw Error(strfmt("%s: truncated imatrix (%s)", path.c_str(), what));
        return v;
    };
    data out;
    out.chunk_size = chunk;
    const int32_t n = read_i32("entry count");
    if (n < 0 || n > (1 << 20))
        throw Error(strfmt("%s: implausible imatrix entry count %d", path.c_str(), n));
    for (int32_t e = 0; e < n; ++e) {
        const int32_t len = read_i32("name length");
        if (len <= 0 || len > 4096)
            throw Error(strfmt("%s: bad name length %d in entry %d", path.c_str(), len, e));
        std::string name(static_cast<size_t>(len), '\0');
        if (!f.read(name.data(), len))
            throw Error(strfmt("%s: truncated imatrix (name of entry %d)", path.c_str(), e));
        const int32_t ncall = read_i32("ncall");
        const int32_t nval = read_i32("nval");
        if (nval <= 0 || nval > (1 << 28))
            throw Error(strfmt("%s: bad value count %d for %s", path.c_str(), nval, name.c_str()));
        std::vector<float> vals(static_cast<size_t>(nval));
        if (!f.read(reinterpret_cast<char*>(vals.data()), static_cast<std::streamsize>(nval) * 4))
            throw Error(strfmt("%s: truncated imatrix (values of %s)", path.c_str(), name.c_str()));
        // values = mean * ncall; rows = ncall * chunk, so in_sum2 = mean * rows = values * chunk.
        const int32_t calls = std::max(ncall, 1);
        entry ent = entry::zeros(nval, 1);
        for (int32_t i = 0; i < nval; ++i)
            ent.in_sum2[static_cast<size_t>(i)] =
                static_cast<double>(vals[static_cast<size_t>(i)]) * chunk;
        ent.counts[0] = static_cast<int64_t>(calls) * chunk;
        out.entries[name] = std::move(ent);
    }
    // Optional trailer (older files end here).
    int32_t chunks = 0, len = 0;
    if (f.read(reinterpret_cast<char*>(&chunks), 4)) {
        out.chunk_count = static_cast<uint32_t>(std::max(chunks, 0));
        if (f.read(reinterpret_cast<char*>(&len), 4) && len > 0 && len < 65536) {
            std::string ds(static_cast<size_t>(len), '\0');
            if (f.read(ds.data(), len)) out.datasets.push_back(ds);
        }
    }
    return out;
}

// An optional unsigned metadata value (0 when absent or not an integer).
uint32_t metadata_u32(const gguf::reader& r, const char* key) {
    const gguf::value* v = r.find(key);
    if (!v || !v->is_integer()) return 0;
    const bool is_signed = v->type == gguf::value_type::i8 || v->type == gguf::value_type::i16 ||
                           v->type == gguf::value_type::i32 || v->type == gguf::value_type::i64;
    return static_cast<uint32_t>(is_signed ? std::max<int64_t>(v->i, 0)
                                           : static_cast<int64_t>(v->u));
}

data read_gguf(const std::string& path) {
    auto r = gguf::reader::open(path);
    data out;
    if (const gguf::value* v = r->find("imatrix.datasets")) {
        for (const auto& s : v->arr) {
            if (s.type == gguf::value_type::string) out.datasets.push_back(s.s);
        }
    }
    out.chunk_count = metadata_u32(*r, "imatrix.chunk_count");
    out.chunk_size = metadata_u32(*r, "imatrix.chunk_size");

    for (const auto& t : r->tensors()) {
        std::string name = t.name;
        if (!strip_suffix(name, kSum2)) {
            std::string other = t.name;
            if (strip_suffix(other, kCounts) || strip_suffix(other, kSum)) {
                if (!r->find_tensor(other + kSum2))
                    throw Error(strfmt("%s: %s has no matching %s%s tensor", path.c_str(),
                                       t.name.c_str(), other.c_str(), kSum2));
            }
            continue;  // other tensors are ignored, as llama.cpp does
        }
        const gguf::tensor_info* c = r->find_tensor(name + kCounts);
        if (t.type != ggml_type::F32 || !c || c->type != ggml_type::F32) {
            throw Error(strfmt("%s: %s needs F32 %s and %s tensors", path.c_str(), name.c_str(),
                               kSum2, kCounts));
        }
        const int64_t n_mat = c->n_elements();
        if (n_mat <= 0 || t.n_elements() % n_mat != 0) {
            throw Error(strfmt("%s: %s%s has %lld values, not a multiple of the %lld counts",
                               path.c_str(), name.c_str(), kSum2,
                               static_cast<long long>(t.n_elements()),
                               static_cast<long long>(n_mat)));
        }
        const int64_t n_per_row = t.n_elements() / n_mat;
        const auto* sums = reinterpret_cast<const float*>(r->tensor_data(t));
        const auto* counts = reinterpret_cast<const float*>(r->tensor_data(*c));
        entry ent = entry::zeros(n_per_row, n_mat);
        for (size_t i = 0; i < ent.in_sum2.size(); ++i) ent.in_sum2[i] = sums[i];
        for (int64_t m = 0; m < n_mat; ++m) {
            const float cm = counts[m];
            if (!(cm >= 0.0f) || !std::isfinite(cm)) {
                throw Error(strfmt("%s: %s%s[%lld] is %g, expected a row count", path.c_str(),
                                   name.c_str(), kCounts, static_cast<long long>(m),
                                   static_cast<double>(cm)));
            }
            ent.counts[static_cast<size_t>(m)] = std::llround(cm);
        }
        out.entries[name] = std::move(ent);
    }
    return out;
}

}  // namespace

entry entry::zeros(int64_t n_per_row, int64_t n_mat) {
    entry e;
    e.n_per_row = n_per_row;
    e.n_mat = n_mat;
    e.in_sum2.assign(static_cast<size_t>(n_per_row * n_mat), 0.0);
    e.counts.assign(static_cast<size_t>(n_mat), 0);
    return e;
}

data read(const std::string& path, uint32_t legacy_chunk_size) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open imatrix file " + path);
    uint32_t magic = 0;
    f.read(reinterpret_cast<char*>(&magic), 4);
    f.close();
    return magic == gguf::kMagic ? read_gguf(path) : read_legacy(path, legacy_chunk_size);
}

void write(const data& d, const std::string& path, std::string* warning) {
    gguf::writer w(path);
    w.set("general.type", gguf::value::make_string("imatrix"));
    w.set("imatrix.datasets", gguf::value::make_string_array(d.datasets));
    w.set("imatrix.chunk_count", gguf::value::make_u32(d.chunk_count));
    w.set("imatrix.chunk_size", gguf::value::make_u32(d.chunk_size));
    int64_t biggest = 0;
    for (const auto& [name, e] : d.entries) {
        w.add_tensor(name + kSum2, ggml_type::F32, {e.n_per_row, e.n_mat});
        w.add_tensor(name + kCounts, ggml_type::F32, {1, e.n_mat});
    }
    std::vector<float> buf;
    for (const auto& [name, e] : d.entries) {
        buf.assign(e.in_sum2.begin(), e.in_sum2.end());
        w.write_tensor_data(buf.data(), buf.size() * 4);
        buf.resize(e.counts.size());
        for (size_t m = 0; m < e.counts.size(); ++m) {
            buf[m] = static_cast<float>(e.counts[m]);
            biggest = std::max(biggest, e.counts[m]);
        }
        w.write_tensor_data(buf.data(), buf.size() * 4);
    }
    w.finish();
    if (warning && biggest > kExactF32) {
        *warning = strfmt(
            "a count of %lld rows exceeds 2^24 and is rounded in the F32 counts "
            "tensor; means stay accurate, but merges of such files are no longer "
            "exact",
            static_cast<long long>(biggest));
    }
}

void merge(data& into, const data& from) {
    for (const auto& [name, e] : from.entries) {
        auto it = into.entries.find(name);
        if (it == into.entries.end()) {
            into.entries.emplace(name, e);
            continue;
        }
        entry& a = it->second;
        if (a.in_sum2.size() != e.in_sum2.size()) {
            throw Error(strfmt(
                "imatrix merge: %s has %lld x %lld values in one file and %lld x "
                "%lld in the other",
                name.c_str(), static_cast<long long>(a.n_per_row), static_cast<long long>(a.n_mat),
                static_cast<long long>(e.n_per_row), static_cast<long long>(e.n_mat)));
        }
        std::vector<int64_t> ec = e.counts;
        if (a.n_mat != e.n_mat) {
            // A legacy entry (one matrix) against per-expert data of the same size.
            if (e.n_mat == 1) {
                ec.assign(static_cast<size_t>(a.n_mat), e.counts[0]);
            } else if (a.n_mat == 1) {
                a.counts.assign(static_cast<size_t>(e.n_mat), a.counts[0]);
                a.n_mat = e.n_mat;
                a.n_per_row = e.n_per_row;
            } else {
                throw Error(
                    strfmt("imatrix merge: %s has %lld matrices in one file and %lld in "
                           "the other",
                           name.c_str(), static_cast<long long>(a.n_mat),
                           static_cast<long long>(e.n_mat)));
            }
        }
        for (size_t i = 0; i < a.in_sum2.size(); ++i) a.in_sum2[i] += e.in_sum2[i];
        for (size_t m = 0; m < a.counts.size(); ++m) a.counts[m] += ec[m];
    }
    into.datasets.insert(into.datasets.end(), from.datasets.begin(), from.datasets.end());
    into.chunk_count += from.chunk_count;
    if (into.chunk_size == 0) into.chunk_size = from.chunk_size;
}

std::vector<float> mean_squares(const entry& e) {
    std::vector<float> out(e.in_sum2.size());
    for (int64_t m = 0; m < e.n_mat; ++m) {
        const int64_t c = e.counts[static_cast<size_t>(m)];
        for (int64_t i = 0; i < e.n_per_row; ++i) {
            const size_t k = static_cast<size_t>(m * e.n_per_row + i);
            out[k] = c > 0 ? static_cast<float>(e.in_sum2[k] / static_cast<double>(c)) : 1.0f;
        }
    }
    return out;
}

}  // namespace magnetar::imatrix
