// GGUF reader: maps a file (or takes a caller's buffer) and validates it completely up front.
//
// Owns: decoding of the header, metadata values (nested arrays included) and the tensor
// directory, and every bounds check on them. The rule throughout: a count or length read from
// the file is compared with the bytes that remain before anything is reserved or read for it,
// and all offset arithmetic goes through the overflow builtins. Does not own the meaning of
// keys or tensor names (src/model).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "core/host.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace magnetar::gguf {

void advise_random_access(const void* data, size_t bytes) {
    if (data == nullptr || bytes == 0) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
    const auto end = reinterpret_cast<uintptr_t>(data) + bytes;
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_RANDOM);
}

static_assert(std::endian::native == std::endian::little,
              "the GGUF decoder copies little-endian fields straight into host integers");

namespace {

using ull = unsigned long long;

constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, n_tensors, n_kv
// Smallest encodings: a key/value pair is a key length, a type and a 1-byte value; a tensor
// info is a name length, n_dims, one ne, a type and an offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Reserving is only an optimisation; items are appended as they are decoded, so memory grows
// with the bytes actually consumed even if a verified count is large.
constexpr uint64_t kMaxReserve = 1 << 20;
// Sanity limits on metadata. In a model file of 100+ GB, "fits in the remaining bytes" is no
// protection: a corrupt array count could make the tensor data decode as hundreds of millions
// of values (about 100 bytes each in memory), a corrupt string length could ask for tens of
// gigabytes. Real files hold about 10^6 values and strings of kilobytes (chat templates).
constexpr uint64_t kMaxValues = uint64_t{1} << 22;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 28;

constexpr uint64_t kNoIndex = ~0ull;

// Descriptions for messages are assembled only when a check fails: a tokenizer array holds
// hundreds of thousands of strings, and formatting "key 'x'[i]" for each would dominate load.
std::string describe(const std::string& what, uint64_t index, const char* detail) {
    std::string s = what;
    if (index != kNoIndex) {
        s += '[';
        s += std::to_string(index);
        s += ']';
    }
    s += detail;
    return s;
}

// Sequential decoder over [base, base + size). Every read checks the remaining length first.
class cursor {
  public:
    cursor(const uint8_t* base, uint64_t size, const std::string& path)
        : base_(base), size_(size), path_(path) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail_at(uint64_t offset, const std::string& msg) const {
        throw Error(
            strfmt("%s: offset %llu: %s", path_.c_str(), static_cast<ull>(offset), msg.c_str()));
    }

    void need(uint64_t n, const std::string& what, const char* detail = "",
              uint64_t index = kNoIndex) const {
        if (n > remaining()) {
            fail_at(pos_, strfmt("truncated file: %s needs %llu bytes, only %llu left (file is "
                                 "%llu bytes)",
                                 describe(what, index, detail).c_str(), static_cast<ull>(n),
                                 static_cast<ull>(remaining()), static_cast<ull>(size_)));
        }
    }

    template <typename T>
    T read(const std::string& what, const char* detail = "", uint64_t index = kNoIndex) {
        need(sizeof(T), what, detail, index);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const std::string& what, uint64_t index = kNoIndex) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(what, " string length", index);
        if (len > remaining()) {
            fail_at(at, strfmt("%s: string length %llu exceeds the %llu bytes left in the file",
                               describe(what, index, "").c_str(), static_cast<ull>(len),
                               static_cast<ull>(remaining())));
        }
        if (len > kMaxStringBytes) {
            fail_at(at, strfmt("%s: string length %llu exceeds the limit of %llu bytes",
                               describe(what, index, "").c_str(), static_cast<ull>(len),
                               static_cast<ull>(kMaxStringBytes)));
        }
        std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

    // Counts metadata values (array items included) before they are decoded, so the limit
    // trips on the count itself rather than after the memory is spent.
    void count_values(uint64_t n, uint64_t at, const std::string& what, uint64_t index) {
        if (n > kMaxValues - values_) {
            fail_at(at, strfmt("%s: metadata would hold more than %llu values (corrupt count?)",
                               describe(what, index, "").c_str(), static_cast<ull>(kMaxValues)));
        }
        values_ += n;
    }

  private:
    const uint8_t* base_;
    uint64_t size_;
    const std::string& path_;
    uint64_t pos_ = 0;
    uint64_t values_ = 0;
};

// `ctx` (plus `index` for an array item) names the key for messages; depth counts enclosing
// arrays.
value parse_value(cursor& cur, value_type type, int depth, const std::string& ctx,
                  uint64_t index = kNoIndex) {
    value v;
    v.type = type;
    switch (type) {
        case value_type::u8:
            v.u = cur.read<uint8_t>(ctx, "", index);
            break;
        case value_type::i8:
            // An i8 value is signed: the sign extension is the point.
            v.i = cur.read<int8_t>(ctx, "", index);  // NOLINT(bugprone-signed-char-misuse)
            break;
        case value_type::u16:
            v.u = cur.read<uint16_t>(ctx, "", index);
            break;
        case value_type::i16:
            v.i = cur.read<int16_t>(ctx, "", index);
            break;
        case value_type::u32:
            v.u = cur.read<uint32_t>(ctx, "", index);
            break;
        case value_type::i32:
            v.i = cur.read<int32_t>(ctx, "", index);
            break;
        case value_type::u64:
            v.u = cur.read<uint64_t>(ctx, "", index);
            break;
        case value_type::i64:
            v.i = cur.read<int64_t>(ctx, "", index);
            break;
        case value_type::f32:
            v.f = static_cast<double>(cur.read<float>(ctx, "", index));
            break;
        case value_type::f64:
            v.f = cur.read<double>(ctx, "", index);
            break;
        case value_type::boolean: {
            const uint64_t at = cur.pos();
            const uint8_t b = cur.read<uint8_t>(ctx, "", index);
            // Anything but 0/1 would not survive a round trip; treat it as corruption.
            if (b > 1) {
                cur.fail_at(at, strfmt("%s: expected bool 0 or 1, found %u",
                                       describe(ctx, index, "").c_str(), b));
            }
            v.u = b;
            break;
        }
        case value_type::string:
            v.s = cur.read_string(ctx, index);
            break;
        case value_type::array: {
            const std::string actx = describe(ctx, index, "");
            if (depth + 1 > detail::kMaxArrayDepth) {
                cur.fail_at(cur.pos(), strfmt("%s: arrays nested deeper than %d levels",
                                              actx.c_str(), detail::kMaxArrayDepth));
            }
            const uint64_t type_at = cur.pos();
            const uint32_t elem = cur.read<uint32_t>(actx, " array element type");
            if (!detail::is_known_value_type(elem)) {
                cur.fail_at(type_at, strfmt("%s: unknown array element type %u (expected 0..12)",
                                            actx.c_str(), elem));
            }
            v.elem_type = static_cast<value_type>(elem);
            const uint64_t count_at = cur.pos();
            const uint64_t count = cur.read<uint64_t>(actx, " array count");
            const uint64_t min_item = detail::min_encoded_size(v.elem_type);
            if (count > cur.remaining() / min_item) {
                cur.fail_at(
                    count_at,
                    strfmt("%s: array of %llu %s items needs at least %llu bytes per "
                           "item, only %llu bytes left in the file",
                           actx.c_str(), static_cast<ull>(count), value_type_name(v.elem_type),
                           static_cast<ull>(min_item), static_cast<ull>(cur.remaining())));
            }
            cur.count_values(count, count_at, actx, kNoIndex);
            v.arr.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
            for (uint64_t k = 0; k < count; ++k) {
                v.arr.push_back(parse_value(cur, v.elem_type, depth + 1, actx, k));
            }
            break;
        }
    }
    return v;
}

uint64_t parse_count(cursor& cur, const char* what, uint64_t min_bytes_each) {
    const uint64_t at = cur.pos();
    const uint64_t n = cur.read<uint64_t>(what);
    if (n > cur.remaining() / min_bytes_each) {
        cur.fail_at(at, strfmt("%s %llu needs at least %llu bytes each, only %llu bytes left in "
                               "the file",
                               what, static_cast<ull>(n), static_cast<ull>(min_bytes_each),
                               static_cast<ull>(cur.remaining())));
    }
    return n;
}

// Names in messages are quoted and cut short: a corrupt length can make a "name" megabytes long.
std::string quoted(const std::string& s, const char* prefix = "") {
    constexpr size_t kMaxShown = 200;
    // Built with appends: GCC 12 at -O3 reports a false -Wrestrict for "literal" + string.
    std::string out = prefix;
    out += '\'';
    out.append(s, 0, std::min(s.size(), kMaxShown));
    out += '\'';
    if (s.size() > kMaxShown) {
        out += "... (";
        out += std::to_string(s.size());
        out += " bytes)";
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------------------------

std::unique_ptr<reader> reader::open(const std::string& path, const open_options& o) {
    std::unique_ptr<reader> r(new reader());
    r->path_ = path;
    // O_NONBLOCK: opening a FIFO by mistake must not hang; it is refused below as not regular.
    r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (r->fd_ < 0) {
        throw Error(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
    }
    struct stat st {};
    if (::fstat(r->fd_, &st) != 0) {
        throw Error(strfmt("%s: cannot stat: %s", path.c_str(), std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, expected a GGUF file");
    if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file, expected a GGUF file");
    r->size_ = static_cast<uint64_t>(st.st_size);
    if (r->size_ > 0) {
        void* p = ::mmap(nullptr, static_cast<size_t>(r->size_), PROT_READ, MAP_PRIVATE, r->fd_, 0);
        if (p == MAP_FAILED) {
            throw Error(strfmt("%s: cannot map %llu bytes: %s", path.c_str(),
                               static_cast<ull>(r->size_), std::strerror(errno)));
        }
        r->base_ = static_cast<const uint8_t*>(p);
        r->mapped_ = true;
    }
    r->parse();
    if (!o.mmap) r->read_into_memory(o);
    if (o.mlock) r->lock(o);
    return r;
}

void reader::read_into_memory(const open_options& o) {
    const uint64_t host = host_memory_bytes();
    if (host != 0 && size_ > host) {
        throw Error(
            strfmt("%s: reading the whole file into memory needs %s, more than the "
                   "host's %s; map it instead (the default)",
                   path_.c_str(), human_bytes(size_).c_str(), human_bytes(host).c_str()));
    }
    const auto n = static_cast<size_t>(size_);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        const int err = errno;
        throw Error(strfmt("%s: cannot allocate %s to read the file into: %s", path_.c_str(),
                           human_bytes(size_).c_str(), std::strerror(err)));
    }
    auto* dst = static_cast<uint8_t*>(p);
    try {
        constexpr size_t kChunk = size_t{64} << 20;
        for (size_t done = 0; done < n;) {
            const ssize_t got =
                ::pread(fd_, dst + done, std::min(kChunk, n - done), static_cast<off_t>(done));
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) {
                const int err = errno;
                throw Error(strfmt("%s: read error at byte %zu: %s", path_.c_str(), done,
                                   std::strerror(err)));
            }
            if (got == 0) {
                throw Error(
                    strfmt("%s: the file ended at byte %zu while being read (%llu "
                           "expected): it changed after it was opened",
                           path_.c_str(), done, static_cast<ull>(size_)));
            }
            done += static_cast<size_t>(got);
            if (o.on_progress) o.on_progress("reading", done, size_);
        }
        // The directory was validated on the mapped bytes: the copy must hold the same ones.
        if (std::memcmp(dst, base_, static_cast<size_t>(data_offset_)) != 0) {
            throw Error(path_ + ": the file changed while being read (its header differs)");
        }
    } catch (...) {
        ::munmap(p, n);
        throw;
    }
    ::mprotect(p, n, PROT_READ);
    ::munmap(const_cast<uint8_t*>(base_), n);
    base_ = dst;
    private_ = true;
    ::close(fd_);
    fd_ = -1;
}

void reader::lock(const open_options& o) {
    if (size_ == 0) return;
    // Raise the soft locked-memory limit as far as the hard one allows (as `ulimit -l` would).
    rlimit rl{};
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < size_) {
        rlimit want = rl;
        want.rlim_cur = rl.rlim_max == RLIM_INFINITY ? RLIM_INFINITY
                                                     : std::max<rlim_t>(rl.rlim_cur, rl.rlim_max);
        if (::setrlimit(RLIMIT_MEMLOCK, &want) == 0) rl = want;
    }
    // In slices, so that the progress of a large file shows (every page is read here).
    constexpr size_t kSlice = size_t{256} << 20;
    const auto n = static_cast<size_t>(size_);
    for (size_t done = 0; done < n;) {
        const size_t len = std::min(kSlice, n - done);
        if (::mlock(base_ + done, len) != 0) {
            const int err = errno;
            if (done > 0) ::munlock(base_, done);
            const std::string limit = rl.rlim_cur == RLIM_INFINITY
                                          ? "unlimited"
                                          : human_bytes(static_cast<uint64_t>(rl.rlim_cur));
            lock_warning_ =
                // ENOMEM above a limit, EPERM for a limit of zero (without CAP_IPC_LOCK).
                (err == ENOMEM || err == EPERM) && rl.rlim_cur != RLIM_INFINITY &&
                        rl.rlim_cur < size_
                    ? strfmt(
                          "cannot lock %s in RAM: the locked-memory limit is %s (raise it "
                          "with `ulimit -l`, or in /etc/security/limits.conf)",
                          human_bytes(size_).c_str(), limit.c_str())
                    : strfmt("cannot lock %s in RAM: %s (locked-memory limit %s)",
                             human_bytes(size_).c_str(), std::strerror(err), limit.c_str());
            return;
        }
        done += len;
        if (o.on_progress) o.on_progress("locking", done, size_);
    }
    locked_ = true;
}

std::unique_ptr<reader> reader::open_memory(const uint8_t* data, size_t size, std::string name) {
    MAGNETAR_ASSERT(data != nullptr || size == 0, "open_memory: null buffer with a size");
    std::unique_ptr<reader> r(new reader());
    r->path_ = std::move(name);
    r->base_ = data;
    r->size_ = size;
    r->parse();
    return r;
}

reader::~reader() {
    if (mapped_) ::munmap(const_cast<uint8_t*>(base_), static_cast<size_t>(size_));
    if (fd_ >= 0) ::close(fd_);
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

void reader::parse() {
    cursor cur(base_, size_, path_);
    if (size_ == 0) {
        cur.fail_at(0, strfmt("empty file, expected a GGUF header (%llu bytes)",
                              static_cast<ull>(kHeaderBytes)));
    }

    // Header.
    const uint32_t magic = cur.read<uint32_t>("GGUF magic");
    if (magic != kMagic) {
        cur.fail_at(0, strfmt("bad magic: expected 'GGUF' (0x%08x), found 0x%08x; not a GGUF file",
                              kMagic, magic));
    }
    const uint32_t version = cur.read<uint32_t>("GGUF version");
    if (version == 1) {
        cur.fail_at(4, "GGUF version 1 (32-bit counts) is not supported, expected version 2 or 3");
    }
    if (version != 2 && version != 3) {
        const uint32_t swapped = __builtin_bswap32(version);
        cur.fail_at(4, strfmt("unsupported GGUF version %u, expected 2 or 3%s", version,
                              (swapped == 2 || swapped == 3) ? " (big-endian file?)" : ""));
    }
    version_ = version;
    const uint64_t n_tensors = parse_count(cur, "tensor count", kMinTensorInfoBytes);
    const uint64_t n_kv = parse_count(cur, "metadata count", kMinKvBytes);
    uint64_t min_tensors, min_kvs, min_rest;
    if (__builtin_mul_overflow(n_tensors, kMinTensorInfoBytes, &min_tensors) ||
        __builtin_mul_overflow(n_kv, kMinKvBytes, &min_kvs) ||
        __builtin_add_overflow(min_tensors, min_kvs, &min_rest) || min_rest > cur.remaining()) {
        cur.fail_at(8, strfmt("%llu tensor infos and %llu metadata entries cannot fit in the "
                              "%llu bytes left in the file",
                              static_cast<ull>(n_tensors), static_cast<ull>(n_kv),
                              static_cast<ull>(cur.remaining())));
    }

    // Metadata. Keys are indexed only once kvs_ stops growing: the index holds string_views
    // into the stored keys, which a reallocation would move.
    std::vector<uint64_t> key_at;
    for (uint64_t k = 0; k < n_kv; ++k) {
        kv entry;
        key_at.push_back(cur.pos());
        entry.key = cur.read_string(strfmt("key of metadata entry #%llu", static_cast<ull>(k)));
        const std::string ctx = quoted(entry.key, "key ");
        const uint64_t type_at = cur.pos();
        const uint32_t type = cur.read<uint32_t>(ctx, " value type");
        if (!detail::is_known_value_type(type)) {
            cur.fail_at(type_at,
                        strfmt("%s: unknown value type %u (expected 0..12)", ctx.c_str(), type));
        }
        cur.count_values(1, type_at, ctx, kNoIndex);
        entry.val = parse_value(cur, static_cast<value_type>(type), 0, ctx);
        kvs_.push_back(std::move(entry));
    }
    for (size_t k = 0; k < kvs_.size(); ++k) {
        auto [it, inserted] = kv_index_.emplace(kvs_[k].key, k);
        if (!inserted) {
            cur.fail_at(key_at[k],
                        strfmt("duplicate key %s (first at offset %llu)",
                               quoted(kvs_[k].key).c_str(), static_cast<ull>(key_at[it->second])));
        }
    }

    if (const value* a = find("general.alignment")) {
        const uint64_t at = key_at[kv_index_.find("general.alignment")->second];
        if (a->type != value_type::u32) {
            cur.fail_at(at, strfmt("key 'general.alignment': expected type u32, found %s",
                                   value_type_name(a->type)));
        }
        if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
            cur.fail_at(at, strfmt("key 'general.alignment': expected a non-zero power of two, "
                                   "found %llu",
                                   static_cast<ull>(a->u)));
        }
        alignment_ = static_cast<uint32_t>(a->u);
    }

    // Tensor directory. Per tensor we remember where its info and its offset field start so
    // later checks (duplicates, bounds, overlap) can point at the right bytes.
    if (n_tensors > cur.remaining() / kMinTensorInfoBytes) {
        cur.fail_at(cur.pos(),
                    strfmt("%llu tensor infos cannot fit in the %llu bytes left",
                           static_cast<ull>(n_tensors), static_cast<ull>(cur.remaining())));
    }
    std::vector<uint64_t> info_at;
    std::vector<uint64_t> offset_at;
    for (uint64_t k = 0; k < n_tensors; ++k) {
        tensor_info t;
        info_at.push_back(cur.pos());
        t.name = cur.read_string(strfmt("name of tensor #%llu", static_cast<ull>(k)));
        const std::string ctx = quoted(t.name, "tensor ");

        const uint64_t dims_at = cur.pos();
        t.n_dims = cur.read<uint32_t>(ctx, " n_dims");
        if (t.n_dims == 0 || t.n_dims > static_cast<uint32_t>(kMaxDims)) {
            cur.fail_at(dims_at,
                        strfmt("%s: n_dims %u, expected 1..%d", ctx.c_str(), t.n_dims, kMaxDims));
        }
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            const uint64_t ne_at = cur.pos();
            const uint64_t ne = cur.read<uint64_t>(ctx, " shape");
            if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                cur.fail_at(ne_at, strfmt("%s: ne[%u] = %llu, expected 1..2^63-1", ctx.c_str(), d,
                                          static_cast<ull>(ne)));
            }
            t.ne[d] = static_cast<int64_t>(ne);
            if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
                cur.fail_at(ne_at, strfmt("%s: element count of shape %s overflows 64 bits",
                                          ctx.c_str(), t.shape_str().c_str()));
            }
        }

        const uint64_t type_at = cur.pos();
        const uint32_t type_id = cur.read<uint32_t>(ctx, " type");
        const type_traits* tr = find_type_traits(type_id);
        if (!tr) {
            cur.fail_at(type_at, strfmt("%s: unknown tensor type id %u", ctx.c_str(), type_id));
        }
        t.type = tr->type;
        // Rows must be whole blocks: kernels and row_bytes() index by row, so a total count that
        // is a multiple of the block but a ragged ne[0] would still be unusable.
        if (t.ne[0] % tr->block_elems != 0) {
            cur.fail_at(type_at,
                        strfmt("%s: type %s needs ne[0] to be a multiple of %u, found "
                               "shape %s",
                               ctx.c_str(), tr->name, tr->block_elems, t.shape_str().c_str()));
        }
        const auto bytes = type_bytes(t.type, static_cast<uint64_t>(n_elements));
        if (!bytes) {
            cur.fail_at(type_at, strfmt("%s: byte size of %s %s overflows 64 bits", ctx.c_str(),
                                        tr->name, t.shape_str().c_str()));
        }
        t.n_bytes = *bytes;

        offset_at.push_back(cur.pos());
        t.offset = cur.read<uint64_t>(ctx, " data offset");
        if (t.offset % alignment_ != 0) {
            cur.fail_at(offset_at.back(),
                        strfmt("%s: data offset %llu is not a multiple of the alignment %u",
                               ctx.c_str(), static_cast<ull>(t.offset), alignment_));
        }
        tensors_.push_back(std::move(t));
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
        auto [it, inserted] = tensor_index_.emplace(tensors_[k].name, k);
        if (!inserted) {
            cur.fail_at(info_at[k], strfmt("duplicate tensor name %s (first at offset %llu)",
                                           quoted(tensors_[k].name).c_str(),
                                           static_cast<ull>(info_at[it->second])));
        }
    }

    // Data section: starts at the end of the infos rounded up to the alignment. A file with no
    // tensors may stop before that padding.
    uint64_t data_offset;
    if (__builtin_add_overflow(cur.pos(), uint64_t{alignment_} - 1, &data_offset)) {
        cur.fail_at(cur.pos(), "data section offset overflows 64 bits");
    }
    data_offset &= ~(uint64_t{alignment_} - 1);
    data_offset_ = std::min(data_offset, size_);

    for (size_t k = 0; k < tensors_.size(); ++k) {
        const tensor_info& t = tensors_[k];
        uint64_t start, end;
        if (__builtin_add_overflow(data_offset, t.offset, &start) ||
            __builtin_add_overflow(start, t.n_bytes, &end)) {
            cur.fail_at(offset_at[k], strfmt("tensor %s: data offset %llu + %llu bytes overflows "
                                             "64 bits",
                                             quoted(t.name).c_str(), static_cast<ull>(t.offset),
                                             static_cast<ull>(t.n_bytes)));
        }
        if (end > size_) {
            cur.fail_at(offset_at[k], strfmt("tensor %s: data [%llu, %llu) extends past end of "
                                             "file (%llu bytes)",
                                             quoted(t.name).c_str(), static_cast<ull>(start),
                                             static_cast<ull>(end), static_cast<ull>(size_)));
        }
    }

    // Overlap: after sorting by offset each tensor must end before the next one starts.
    std::vector<size_t> order(tensors_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [this](size_t a, size_t b) {
        return tensors_[a].offset < tensors_[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
        const tensor_info& prev = tensors_[order[k - 1]];
        const tensor_info& t = tensors_[order[k]];
        if (prev.offset + prev.n_bytes > t.offset) {
            cur.fail_at(
                offset_at[order[k]],
                strfmt("tensor %s: data [%llu, %llu) overlaps tensor %s [%llu, %llu)",
                       quoted(t.name).c_str(), static_cast<ull>(data_offset + t.offset),
                       static_cast<ull>(data_offset + t.offset + t.n_bytes),
                       quoted(prev.name).c_str(), static_cast<ull>(data_offset + prev.offset),
                       static_cast<ull>(data_offset + prev.offset + prev.n_bytes)));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lookups
// ---------------------------------------------------------------------------------------------

const value* reader::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].val;
}

const tensor_info* reader::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* reader::tensor_data(const tensor_info& t) const {
    MAGNETAR_ASSERT(
        t.offset <= size_ - data_offset_ && t.n_bytes <= size_ - data_offset_ - t.offset,
        "tensor_data: tensor_info does not come from this reader");
    return base_ + data_offset_ + t.offset;
}

}  // namespace magnetar::gguf
