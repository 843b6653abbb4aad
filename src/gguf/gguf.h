// GGUF container: metadata values, mmap reader and streaming writer.
//
// Owns: the GGUF v2/v3 byte format (header, key/value metadata of every type including nested
// arrays, tensor directory, alignment, data section) and its bounds checking. Knows nothing
// about DeepSeek: the model catalogue (src/model) interprets keys and tensor names.
//
// Reader contract: open() validates the whole header and tensor directory up front. Every
// length, count, offset and size is checked against the file size with overflow-safe
// arithmetic before use, so a truncated or corrupt file yields a magnetar::Error naming the
// file, the byte offset and what was expected; never a crash, hang or huge allocation.
// After open() succeeds, every tensor's bytes lie inside the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace magnetar::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

enum class value_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

const char* value_type_name(value_type t);

// One metadata value. Scalars live in the matching member; arrays hold their element type and
// items (items of an array of arrays are themselves arrays).
struct value {
    value_type type = value_type::u8;
    uint64_t u = 0;                         // u8 / u16 / u32 / u64 / bool
    int64_t i = 0;                          // i8 / i16 / i32 / i64
    double f = 0.0;                         // f32 / f64 (f32 stored exactly)
    std::string s;                          // string
    value_type elem_type = value_type::u8;  // array element type
    std::vector<value> arr;                 // array items

    // Constructors for building metadata.
    static value make_u8(uint8_t v);
    static value make_i8(int8_t v);
    static value make_u16(uint16_t v);
    static value make_i16(int16_t v);
    static value make_u32(uint32_t v);
    static value make_i32(int32_t v);
    static value make_u64(uint64_t v);
    static value make_i64(int64_t v);
    static value make_f32(float v);
    static value make_f64(double v);
    static value make_bool(bool v);
    static value make_string(std::string v);
    static value make_array(value_type elem, std::vector<value> items);
    static value make_string_array(const std::vector<std::string>& items);
    static value make_i32_array(const std::vector<int32_t>& items);
    static value make_f32_array(const std::vector<float>& items);

    bool is_integer() const;  // any of the eight integer types
    bool is_float() const;    // f32 / f64

    bool operator==(const value& o) const;
};

struct kv {
    std::string key;
    value val;
};

struct tensor_info {
    std::string name;
    ggml_type type = ggml_type::F32;
    uint32_t n_dims = 0;
    int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is contiguous; unused dims are 1
    uint64_t offset = 0;                  // relative to the data section
    uint64_t n_bytes = 0;                 // derived from type and shape

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // "[4096, 129280]" style shape string (n_dims entries).
    std::string shape_str() const;
};

// Tells the kernel that a mapped range is read at random (no read-around on page faults), so
// a lookup touches only the pages of the bytes it reads: for tables far larger than RAM that
// are read a few rows at a time (the V4.1 Engram tables). Best effort: a failure is ignored.
void advise_random_access(const void* data, size_t bytes);

// How reader::open brings a file's bytes into memory.
struct open_options {
    // true: map the file; pages are read on first touch, shared with the page cache, and may
    // be dropped under memory pressure and read again. false: after validation, read the whole
    // file into private memory (the open takes as long as reading the file; afterwards no
    // access touches the file). Refused when the file is larger than the host's memory.
    bool mmap = true;
    // Lock the bytes in RAM (mlock) so that they are never paged out; with mmap, every page is
    // read at open. Best effort: a refusal (the locked-memory limit, no memory) leaves the
    // reader usable and says why in lock_warning().
    bool mlock = false;
    // Called as the bytes are read (mmap false; phase "reading") or locked ("locking"), with
    // bytes done and the total.
    std::function<void(const char* phase, uint64_t done, uint64_t total)> on_progress;
};

// Read-only view of a GGUF file mapped in memory.
class reader {
  public:
    // Maps and validates the file. Throws magnetar::Error on any problem.
    static std::unique_ptr<reader> open(const std::string& path, const open_options& o = {});
    // Validates a GGUF image already in memory (same checks as open()). The caller keeps the
    // buffer alive and unchanged for the reader's lifetime; `name` stands in for the path in
    // error messages. Used by the fuzzer and by tests that corrupt bytes in place.
    static std::unique_ptr<reader> open_memory(const uint8_t* data, size_t size, std::string name);
    ~reader();
    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t file_size() const { return size_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute start of data section
    // The file's bytes were read into private memory (open_options::mmap false).
    bool in_private_memory() const { return private_; }
    // The bytes are locked in RAM (open_options::mlock granted).
    bool locked() const { return locked_; }
    // Why a requested lock was not granted; empty when it was, or when none was asked.
    const std::string& lock_warning() const { return lock_warning_; }

    // Metadata in file order.
    std::span<const kv> metadata() const { return kvs_; }
    // nullptr if absent.
    const value* find(std::string_view key) const;

    // Tensor directory in file order.
    std::span<const tensor_info> tensors() const { return tensors_; }
    // nullptr if absent.
    const tensor_info* find_tensor(std::string_view name) const;
    // Pointer to a tensor's bytes inside the mapping.
    const uint8_t* tensor_data(const tensor_info& t) const;

  private:
    reader() = default;
    void parse();  // fills everything below from base_/size_; throws on the first problem
    void read_into_memory(const open_options& o);  // the mapping replaced by a private copy
    void lock(const open_options& o);

    std::string path_;
    int fd_ = -1;
    bool mapped_ = false;   // base_ is our mmap (open) rather than the caller's buffer
    bool private_ = false;  // ... of anonymous memory holding a copy of the file
    bool locked_ = false;
    std::string lock_warning_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint32_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<kv> kvs_;
    std::vector<tensor_info> tensors_;
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Streaming writer. Usage:
//   writer w(path);               // writes to path + ".tmp", renamed on finish()
//   w.set(key, value) ...;        // metadata, in the order given (a repeated key replaces)
//   w.add_tensor(name, type, {ne0, ne1, ...}) ...;   // declares the directory
//   w.write_tensor_data(bytes, n) ...;  // tensor bytes in declaration order, any chunking
//   w.finish();                   // checks every tensor was fully written, fsyncs, renames
// Only the current chunk is ever held in memory. Throws magnetar::Error on I/O errors or
// misuse (wrong byte counts, duplicate tensor names, shapes not a multiple of the block).
// If destroyed before finish(), the temporary file is removed.
class writer {
  public:
    explicit writer(std::string path, uint32_t alignment = kDefaultAlignment, uint32_t version = 3);
    ~writer();
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;

    void set(const std::string& key, value v);
    // Drops a key set earlier (before any tensor data is written); false if it was not set.
    bool remove(const std::string& key);
    void add_tensor(const std::string& name, ggml_type type, std::span<const int64_t> ne);
    void add_tensor(const std::string& name, ggml_type type, std::initializer_list<int64_t> ne) {
        add_tensor(name, type, std::span<const int64_t>(ne.begin(), ne.size()));
    }

    // Appends bytes of the current tensor (tensors are filled in declaration order; a chunk
    // may span the end of one tensor and the start of the next).
    void write_tensor_data(const void* data, size_t n);

    void finish();

    // Total file size that finish() will produce (valid after the last add_tensor).
    uint64_t planned_size() const;

  private:
    void write_header();
    bool needs_alignment_key() const;       // general.alignment is added when not default
    uint64_t header_size() const;           // encoded metadata + tensor infos, before padding
    void emit(const void* data, size_t n);  // buffered for small n, straight to fd_ for big n
    void emit_zeros(uint64_t n);
    void flush_buffer();
    void write_fd(const void* data, size_t n);
    void check_usable(const char* what) const;  // throws once finished

    std::string path_;
    std::string tmp_path_;
    uint32_t alignment_;
    uint32_t version_;
    int fd_ = -1;
    bool header_written_ = false;
    bool finished_ = false;
    std::vector<kv> kvs_;
    std::vector<tensor_info> tensors_;
    size_t cur_tensor_ = 0;
    uint64_t cur_written_ = 0;           // bytes written into the current tensor
    uint64_t data_written_ = 0;          // bytes written into the data section, padding included
    uint64_t tensor_bytes_total_ = 0;    // sum of n_bytes over the directory
    uint64_t tensor_bytes_written_ = 0;  // tensor bytes received so far, padding excluded
    uint64_t file_pos_ = 0;              // bytes handed to emit() so far (buffered or written)
    uint64_t fd_pos_ = 0;                // bytes actually written to fd_
    std::vector<uint8_t> buf_;           // output buffer for small writes
};

}  // namespace magnetar::gguf
