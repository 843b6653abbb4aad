// GGUF streaming writer: metadata and tensor directory first, then tensor bytes as they come.
//
// Owns: encoding of the header, metadata values and tensor infos; the data-section layout
// (each tensor at an aligned offset, padded to the alignment); and crash safety: everything
// goes to `path.tmp`, which is fsynced, renamed over `path` and followed by an fsync of the
// directory, so `path` is either the old file or the complete new one. Does not own what the
// keys or tensors mean.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace magnetar::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF encoder copies host integers straight into little-endian fields");

namespace {

using ull = unsigned long long;

constexpr size_t kBufferBytes = size_t{1} << 20;    // small writes collect here
constexpr size_t kDirectBytes = size_t{256} << 10;  // writes this big bypass the buffer

uint64_t align_up(uint64_t n, uint64_t alignment) {
    return (n + alignment - 1) & ~(alignment - 1);
}

bool is_power_of_two(uint64_t n) {
    return n != 0 && (n & (n - 1)) == 0;
}

// Largest value an unsigned member may hold for its type, and the signed range; a value built
// by hand (not through make_*) must still encode without silent truncation.
bool in_range(const value& v) {
    switch (v.type) {
        case value_type::u8:
            return v.u <= 0xff;
        case value_type::u16:
            return v.u <= 0xffff;
        case value_type::u32:
            return v.u <= 0xffffffffull;
        case value_type::boolean:
            return v.u <= 1;
        case value_type::i8:
            return v.i >= -128 && v.i <= 127;
        case value_type::i16:
            return v.i >= -32768 && v.i <= 32767;
        case value_type::i32:
            return v.i >= std::numeric_limits<int32_t>::min() &&
                   v.i <= std::numeric_limits<int32_t>::max();
        case value_type::f32:
            // Converting a finite double beyond float's range is undefined behaviour.
            return !std::isfinite(v.f) || std::fabs(v.f) <= std::numeric_limits<float>::max();
        default:
            return true;
    }
}

// Throws unless v can be encoded and read back: known types, array items matching the element
// type, nesting within the reader's limit, integers within their type's range.
void check_value(const std::string& path, const std::string& ctx, const value& v, int depth) {
    if (!detail::is_known_value_type(static_cast<uint32_t>(v.type))) {
        throw Error(strfmt("%s: %s: unknown value type %u", path.c_str(), ctx.c_str(),
                           static_cast<unsigned>(v.type)));
    }
    if (!in_range(v)) {
        throw Error(strfmt("%s: %s: value out of range for type %s", path.c_str(), ctx.c_str(),
                           value_type_name(v.type)));
    }
    if (v.type != value_type::array) return;
    if (depth + 1 > detail::kMaxArrayDepth) {
        throw Error(strfmt("%s: %s: arrays nested deeper than %d levels", path.c_str(), ctx.c_str(),
                           detail::kMaxArrayDepth));
    }
    if (!detail::is_known_value_type(static_cast<uint32_t>(v.elem_type))) {
        throw Error(strfmt("%s: %s: unknown array element type %u", path.c_str(), ctx.c_str(),
                           static_cast<unsigned>(v.elem_type)));
    }
    for (size_t k = 0; k < v.arr.size(); ++k) {
        const value& item = v.arr[k];
        if (item.type != v.elem_type) {
            throw Error(strfmt("%s: %s[%zu]: item of type %s in an array of %s", path.c_str(),
                               ctx.c_str(), k, value_type_name(item.type),
                               value_type_name(v.elem_type)));
        }
        if (item.type == value_type::array || !in_range(item)) {
            check_value(path, strfmt("%s[%zu]", ctx.c_str(), k), item, depth + 1);
        }
    }
}

// Encoded size of a value's payload (after its type field, for top-level values).
uint64_t encoded_size(const value& v) {
    switch (v.type) {
        case value_type::string:
            return 8 + v.s.size();
        case value_type::array: {
            uint64_t n = 4 + 8;
            const size_t fixed = detail::scalar_size(v.elem_type);
            if (fixed != 0) return n + fixed * v.arr.size();
            for (const value& item : v.arr) n += encoded_size(item);
            return n;
        }
        default:
            return detail::scalar_size(v.type);
    }
}

template <typename T, typename Put>
void put_pod(Put& put, T v) {
    put(&v, sizeof v);
}

template <typename Put>
void put_string(Put& put, const std::string& s) {
    put_pod<uint64_t>(put, s.size());
    put(s.data(), s.size());
}

template <typename Put>
void put_value(Put& put, const value& v) {
    switch (v.type) {
        case value_type::u8:
            put_pod(put, static_cast<uint8_t>(v.u));
            break;
        case value_type::i8:
            put_pod(put, static_cast<int8_t>(v.i));
            break;
        case value_type::u16:
            put_pod(put, static_cast<uint16_t>(v.u));
            break;
        case value_type::i16:
            put_pod(put, static_cast<int16_t>(v.i));
            break;
        case value_type::u32:
            put_pod(put, static_cast<uint32_t>(v.u));
            break;
        case value_type::i32:
            put_pod(put, static_cast<int32_t>(v.i));
            break;
        case value_type::u64:
            put_pod(put, v.u);
            break;
        case value_type::i64:
            put_pod(put, v.i);
            break;
        case value_type::f32:
            put_pod(put, static_cast<float>(v.f));
            break;
        case value_type::f64:
            put_pod(put, v.f);
            break;
        case value_type::boolean:
            put_pod(put, static_cast<uint8_t>(v.u ? 1 : 0));
            break;
        case value_type::string:
            put_string(put, v.s);
            break;
        case value_type::array:
            put_pod(put, static_cast<uint32_t>(v.elem_type));
            put_pod<uint64_t>(put, v.arr.size());
            for (const value& item : v.arr) put_value(put, item);
            break;
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Set-up and teardown
// ---------------------------------------------------------------------------------------------

writer::writer(std::string path, uint32_t alignment, uint32_t version)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), alignment_(alignment), version_(version) {
    if (!is_power_of_two(alignment_)) {
        throw Error(
            strfmt("%s: alignment %u is not a non-zero power of two", path_.c_str(), alignment_));
    }
    if (version_ != 2 && version_ != 3) {
        throw Error(
            strfmt("%s: cannot write GGUF version %u, expected 2 or 3", path_.c_str(), version_));
    }
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        throw Error(strfmt("%s: cannot create %s: %s", path_.c_str(), tmp_path_.c_str(),
                           std::strerror(errno)));
    }
    buf_.reserve(kBufferBytes);
}

writer::~writer() {
    if (fd_ >= 0) ::close(fd_);
    if (!finished_) ::unlink(tmp_path_.c_str());
}

void writer::check_usable(const char* what) const {
    if (finished_) throw Error(strfmt("%s: %s after finish()", path_.c_str(), what));
}

// ---------------------------------------------------------------------------------------------
// Directory
// ---------------------------------------------------------------------------------------------

void writer::set(const std::string& key, value v) {
    check_usable("set()");
    if (header_written_) {
        throw Error(strfmt("%s: key '%s': metadata is fixed once tensor data has been written",
                           path_.c_str(), key.c_str()));
    }
    if (key.empty()) throw Error(path_ + ": empty metadata key");
    check_value(path_, strfmt("key '%s'", key.c_str()), v, 0);
    if (key == "general.alignment" && (v.type != value_type::u32 || v.u != alignment_)) {
        throw Error(
            strfmt("%s: key 'general.alignment' must be u32 %u (the writer's alignment), "
                   "got %s %llu",
                   path_.c_str(), alignment_, value_type_name(v.type), static_cast<ull>(v.u)));
    }
    for (kv& e : kvs_) {
        if (e.key == key) {
            e.val = std::move(v);
            return;
        }
    }
    kvs_.push_back(kv{key, std::move(v)});
}

bool writer::remove(const std::string& key) {
    check_usable("remove()");
    if (header_written_) {
        throw Error(strfmt("%s: key '%s': metadata is fixed once tensor data has been written",
                           path_.c_str(), key.c_str()));
    }
    for (auto it = kvs_.begin(); it != kvs_.end(); ++it) {
        if (it->key == key) {
            kvs_.erase(it);
            return true;
        }
    }
    return false;
}

void writer::add_tensor(const std::string& name, ggml_type type, std::span<const int64_t> ne) {
    check_usable("add_tensor()");
    if (header_written_) {
        throw Error(
            strfmt("%s: tensor '%s': the directory is fixed once tensor data has been "
                   "written",
                   path_.c_str(), name.c_str()));
    }
    if (name.empty()) throw Error(path_ + ": empty tensor name");
    for (const tensor_info& t : tensors_) {
        if (t.name == name) {
            throw Error(strfmt("%s: duplicate tensor name '%s'", path_.c_str(), name.c_str()));
        }
    }
    const type_traits* tr = find_type_traits(static_cast<uint32_t>(type));
    if (!tr) {
        throw Error(strfmt("%s: tensor '%s': unknown tensor type id %u", path_.c_str(),
                           name.c_str(), static_cast<unsigned>(type)));
    }
    if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
        throw Error(strfmt("%s: tensor '%s': %zu dimensions, expected 1..%d", path_.c_str(),
                           name.c_str(), ne.size(), kMaxDims));
    }
    tensor_info t;
    t.name = name;
    t.type = type;
    t.n_dims = static_cast<uint32_t>(ne.size());
    int64_t n_elements = 1;
    for (size_t d = 0; d < ne.size(); ++d) {
        t.ne[d] = ne[d];
        if (ne[d] <= 0 || __builtin_mul_overflow(n_elements, ne[d], &n_elements)) {
            throw Error(strfmt("%s: tensor '%s': shape %s is not positive or overflows",
                               path_.c_str(), name.c_str(), t.shape_str().c_str()));
        }
    }
    if (t.ne[0] % tr->block_elems != 0) {
        throw Error(
            strfmt("%s: tensor '%s': type %s needs ne[0] to be a multiple of %u, got "
                   "shape %s",
                   path_.c_str(), name.c_str(), tr->name, tr->block_elems, t.shape_str().c_str()));
    }
    const auto bytes = type_bytes(type, static_cast<uint64_t>(n_elements));
    uint64_t offset = 0;
    if (!tensors_.empty()) {
        const tensor_info& prev = tensors_.back();
        offset = prev.offset + align_up(prev.n_bytes, alignment_);
    }
    uint64_t padded_end;
    if (!bytes || *bytes > std::numeric_limits<uint64_t>::max() / 2 ||
        __builtin_add_overflow(offset, align_up(*bytes, alignment_), &padded_end) ||
        padded_end > std::numeric_limits<uint64_t>::max() / 2) {
        throw Error(strfmt("%s: tensor '%s': data size of %s %s overflows", path_.c_str(),
                           name.c_str(), tr->name, t.shape_str().c_str()));
    }
    t.n_bytes = *bytes;
    t.offset = offset;
    tensor_bytes_total_ += t.n_bytes;
    tensors_.push_back(std::move(t));
}

bool writer::needs_alignment_key() const {
    if (alignment_ == kDefaultAlignment) return false;
    for (const kv& e : kvs_) {
        if (e.key == "general.alignment") return false;
    }
    return true;
}

uint64_t writer::header_size() const {
    uint64_t n = 4 + 4 + 8 + 8;
    if (needs_alignment_key()) n += 8 + std::strlen("general.alignment") + 4 + 4;
    for (const kv& e : kvs_) n += 8 + e.key.size() + 4 + encoded_size(e.val);
    for (const tensor_info& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.n_dims + 4 + 8;
    return n;
}

uint64_t writer::planned_size() const {
    uint64_t n = align_up(header_size(), alignment_);
    if (!tensors_.empty()) {
        const tensor_info& last = tensors_.back();
        n += last.offset + align_up(last.n_bytes, alignment_);
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

void writer::write_header() {
    auto put = [this](const void* p, size_t n) { emit(p, n); };
    const bool add_alignment = needs_alignment_key();
    put_pod(put, kMagic);
    put_pod(put, version_);
    put_pod<uint64_t>(put, tensors_.size());
    put_pod<uint64_t>(put, kvs_.size() + (add_alignment ? 1 : 0));
    if (add_alignment) {
        put_string(put, "general.alignment");
        put_pod(put, static_cast<uint32_t>(value_type::u32));
        put_pod(put, alignment_);
    }
    for (const kv& e : kvs_) {
        put_string(put, e.key);
        put_pod(put, static_cast<uint32_t>(e.val.type));
        put_value(put, e.val);
    }
    for (const tensor_info& t : tensors_) {
        put_string(put, t.name);
        put_pod(put, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) put_pod(put, static_cast<uint64_t>(t.ne[d]));
        put_pod(put, static_cast<uint32_t>(t.type));
        put_pod(put, t.offset);
    }
    emit_zeros(align_up(file_pos_, alignment_) - file_pos_);
    header_written_ = true;
}

void writer::write_tensor_data(const void* data, size_t n) {
    check_usable("write_tensor_data()");
    if (n == 0) return;
    if (!data) throw Error(path_ + ": write_tensor_data() with a null pointer");
    const uint64_t left = tensor_bytes_total_ - tensor_bytes_written_;
    if (n > left) {
        throw Error(
            strfmt("%s: write_tensor_data(): %zu bytes given but only %llu bytes of "
                   "declared tensor data remain",
                   path_.c_str(), n, static_cast<ull>(left)));
    }
    if (!header_written_) write_header();
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        const tensor_info& t = tensors_[cur_tensor_];
        const uint64_t take = std::min<uint64_t>(n, t.n_bytes - cur_written_);
        emit(p, static_cast<size_t>(take));
        p += take;
        n -= static_cast<size_t>(take);
        cur_written_ += take;
        tensor_bytes_written_ += take;
        data_written_ += take;
        if (cur_written_ == t.n_bytes) {
            const uint64_t pad = align_up(t.n_bytes, alignment_) - t.n_bytes;
            emit_zeros(pad);
            data_written_ += pad;
            ++cur_tensor_;
            cur_written_ = 0;
        }
    }
}

void writer::finish() {
    check_usable("finish()");
    if (!header_written_) write_header();
    if (cur_tensor_ < tensors_.size()) {
        const tensor_info& t = tensors_[cur_tensor_];
        throw Error(
            strfmt("%s: finish(): tensor '%s' has %llu of %llu bytes; %llu bytes of "
                   "tensor data are missing in total",
                   path_.c_str(), t.name.c_str(), static_cast<ull>(cur_written_),
                   static_cast<ull>(t.n_bytes),
                   static_cast<ull>(tensor_bytes_total_ - tensor_bytes_written_)));
    }
    flush_buffer();
    if (::fsync(fd_) != 0) {
        throw Error(strfmt("%s: fsync of %s failed: %s", path_.c_str(), tmp_path_.c_str(),
                           std::strerror(errno)));
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
        throw Error(strfmt("%s: close of %s failed: %s", path_.c_str(), tmp_path_.c_str(),
                           std::strerror(errno)));
    }
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        throw Error(strfmt("%s: cannot rename %s into place: %s", path_.c_str(), tmp_path_.c_str(),
                           std::strerror(errno)));
    }
    finished_ = true;
    // The rename is durable only once the directory entry is on disk.
    const size_t slash = path_.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        throw Error(strfmt("%s: cannot open directory %s to fsync it: %s", path_.c_str(),
                           dir.c_str(), std::strerror(errno)));
    }
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    // Some file systems cannot fsync a directory (EINVAL); the data itself is already synced.
    if (rc != 0 && err != EINVAL) {
        throw Error(strfmt("%s: fsync of directory %s failed: %s", path_.c_str(), dir.c_str(),
                           std::strerror(err)));
    }
}

void writer::emit(const void* data, size_t n) {
    if (n >= kDirectBytes) {
        flush_buffer();
        write_fd(data, n);
    } else {
        if (buf_.size() + n > kBufferBytes) flush_buffer();
        const uint8_t* p = static_cast<const uint8_t*>(data);
        buf_.insert(buf_.end(), p, p + n);
    }
    file_pos_ += n;
}

void writer::emit_zeros(uint64_t n) {
    static const uint8_t kZeros[4096] = {};
    while (n > 0) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZeros));
        emit(kZeros, take);
        n -= take;
    }
}

void writer::flush_buffer() {
    if (buf_.empty()) return;
    write_fd(buf_.data(), buf_.size());
    buf_.clear();
}

void writer::write_fd(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            // write() returning 0 for a non-empty request means no progress is possible.
            const int err = w < 0 ? errno : ENOSPC;
            throw Error(strfmt("%s: writing %s failed at offset %llu: %s", path_.c_str(),
                               tmp_path_.c_str(), static_cast<ull>(fd_pos_), std::strerror(err)));
        }
        p += w;
        n -= static_cast<size_t>(w);
        fd_pos_ += static_cast<uint64_t>(w);
    }
}

}  // namespace magnetar::gguf
