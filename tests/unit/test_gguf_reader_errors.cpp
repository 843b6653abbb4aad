// GGUF reader errors: file-level failures (missing, directory, FIFO, empty, short files) and
// specific corruptions of hand-built files, each message naming its culprit.
//
// Round trips and writer misuse live in test_gguf.cpp, corruption sweeps in test_gguf_fuzz.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "support/test_support.h"
#include "unit/gguf_test_helpers.h"

namespace magnetar::gguf {
namespace {

using test::error_of;
using test::temp_dir;
using test::write_file;

// Little-endian byte builder for files the writer refuses to produce.
struct builder {
    std::vector<uint8_t> b;

    builder& u8(uint8_t v) { return raw(&v, 1); }
    builder& u32(uint32_t v) { return raw(&v, 4); }
    builder& u64(uint64_t v) { return raw(&v, 8); }
    builder& raw(const void* p, size_t n) {
        const uint8_t* c = static_cast<const uint8_t*>(p);
        b.insert(b.end(), c, c + n);
        return *this;
    }
    builder& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
    builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
    }
    builder& kv_u32(const std::string& key, uint32_t v) {
        return str(key).u32(static_cast<uint32_t>(value_type::u32)).u32(v);
    }
    builder& kv_str(const std::string& key, const std::string& v) {
        return str(key).u32(static_cast<uint32_t>(value_type::string)).str(v);
    }
    builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                    uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t n : ne) u64(n);
        return u32(type).u64(offset);
    }
    builder& pad(size_t alignment) {
        while (b.size() % alignment) b.push_back(0);
        return *this;
    }
    builder& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

std::string open_error(const std::vector<uint8_t>& bytes) {
    return error_of([&] { reader::open_memory(bytes.data(), bytes.size(), "crafted.gguf"); });
}

constexpr uint32_t kF32 = static_cast<uint32_t>(ggml_type::F32);

// ---------------------------------------------------------------------------------------------
// Reader: file-level errors
// ---------------------------------------------------------------------------------------------

TEST(gguf_reader_errors, nonexistent_file) {
    const std::string path = temp_dir() + "/missing.gguf";
    const std::string msg = error_of([&] { reader::open(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, directory) {
    const std::string dir = temp_dir();
    const std::string msg = error_of([&] { reader::open(dir); });
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
    EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, fifo_is_refused_without_blocking) {
    const std::string path = temp_dir() + "/fifo";
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    const std::string msg = error_of([&] { reader::open(path); });
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, empty_file) {
    const std::string path = temp_dir() + "/empty.gguf";
    write_file(path, {});
    const std::string msg = error_of([&] { reader::open(path); });
    EXPECT_NE(msg.find(path + ": offset 0: empty file"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, smaller_than_header) {
    const std::string path = temp_dir() + "/short.gguf";
    write_file(path, {'G', 'G', 'U', 'F', 3, 0});
    const std::string msg = error_of([&] { reader::open(path); });
    EXPECT_NE(msg.find(path + ": offset 4: truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("version"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------
// Reader: specific corruptions, each naming its culprit
// ---------------------------------------------------------------------------------------------

TEST(gguf_reader_errors, bad_magic) {
    builder f;
    f.u32(0x46554748).u32(3).u64(0).u64(0);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("crafted.gguf: offset 0: bad magic"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, bad_version) {
    for (uint32_t v : {0u, 4u, 0x03000000u}) {
        builder f;
        f.header(0, 0, v);
        const std::string msg = open_error(f.b);
        EXPECT_NE(msg.find("offset 4"), std::string::npos) << msg;
        EXPECT_NE(msg.find("version " + std::to_string(v)), std::string::npos) << msg;
    }
    builder v1;
    v1.u32(kMagic).u32(1).u32(0).u32(0);
    EXPECT_NE(open_error(v1.b).find("version 1"), std::string::npos);
}

TEST(gguf_reader_errors, huge_counts) {
    builder f;
    f.header(1ull << 60, 0);
    EXPECT_NE(open_error(f.b).find("offset 8: tensor count"), std::string::npos);
    builder g;
    g.header(0, ~0ull);
    EXPECT_NE(open_error(g.b).find("offset 16: metadata count"), std::string::npos);
}

TEST(gguf_reader_errors, huge_array_count) {
    builder f;
    f.header(0, 1).str("big.array").u32(static_cast<uint32_t>(value_type::array));
    f.u32(static_cast<uint32_t>(value_type::u8)).u64(1ull << 60).zeros(64);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'big.array'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(24 + 8 + 9 + 4 + 4)), std::string::npos) << msg;
    // Strings need at least 8 bytes each: 64 bytes cannot hold 9 of them.
    builder g;
    g.header(0, 1).str("strings").u32(static_cast<uint32_t>(value_type::array));
    g.u32(static_cast<uint32_t>(value_type::string)).u64(9).zeros(64);
    EXPECT_NE(open_error(g.b).find("'strings'"), std::string::npos);
}

// A count that the remaining bytes could hold but that no real file has (in a 100 GB model a
// corrupt count would otherwise decode gigabytes of tensor data as metadata).
TEST(gguf_reader_errors, too_many_metadata_values) {
    const uint64_t count = (uint64_t{1} << 22) + 1;
    builder f;
    f.header(0, 1).str("many").u32(static_cast<uint32_t>(value_type::array));
    f.u32(static_cast<uint32_t>(value_type::u8)).u64(count).zeros(count);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'many': metadata would hold more than 4194304 values"), std::string::npos)
        << msg;
}

TEST(gguf_reader_errors, huge_string_length) {
    builder f;
    f.header(0, 1).str("huge.string").u32(static_cast<uint32_t>(value_type::string));
    f.u64(1ull << 62).zeros(16);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'huge.string'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("string length"), std::string::npos) << msg;

    builder k;  // the key itself
    k.header(0, 1).u64(~0ull).zeros(32);
    const std::string kmsg = open_error(k.b);
    EXPECT_NE(kmsg.find("offset 24: key of metadata entry #0"), std::string::npos) << kmsg;
}

TEST(gguf_reader_errors, duplicate_key) {
    builder f;
    f.header(0, 3).kv_u32("a", 1).kv_u32("dup.key", 2).kv_u32("dup.key", 3);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("duplicate key 'dup.key'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset "), std::string::npos) << msg;
}

TEST(gguf_reader_errors, unknown_value_type) {
    builder f;
    f.header(0, 1).str("odd.type").u32(13).u32(0);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'odd.type'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown value type 13"), std::string::npos) << msg;
    builder g;
    g.header(0, 1).str("odd.elem").u32(static_cast<uint32_t>(value_type::array)).u32(77).u64(0);
    EXPECT_NE(open_error(g.b).find("'odd.elem'"), std::string::npos);
}

TEST(gguf_reader_errors, bool_not_0_or_1) {
    builder f;
    f.header(0, 1).str("flag").u32(static_cast<uint32_t>(value_type::boolean)).u8(2);
    EXPECT_NE(open_error(f.b).find("'flag'"), std::string::npos);
}

TEST(gguf_reader_errors, nesting_depth) {
    auto nested = [](int depth) {
        builder f;
        f.header(0, 1).str("deep").u32(static_cast<uint32_t>(value_type::array));
        for (int d = 1; d < depth; ++d) f.u32(static_cast<uint32_t>(value_type::array)).u64(1);
        f.u32(static_cast<uint32_t>(value_type::u8)).u64(1).u8(42);
        return f.b;
    };
    const auto ok = nested(8);
    auto r = reader::open_memory(ok.data(), ok.size(), "ok.gguf");
    EXPECT_EQ(r->find("deep")->arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].u, 42u);
    const auto deep = nested(9);
    const std::string msg = open_error(deep);
    EXPECT_NE(msg.find("'deep'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, bad_alignment_value) {
    for (uint32_t a : {0u, 48u, 3u}) {
        builder f;
        f.header(0, 1).kv_u32("general.alignment", a);
        const std::string msg = open_error(f.b);
        EXPECT_NE(msg.find("offset 24: key 'general.alignment'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("power of two"), std::string::npos) << msg;
    }
    builder f;
    f.header(0, 1).str("general.alignment").u32(static_cast<uint32_t>(value_type::u64)).u64(32);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'general.alignment': expected type u32, found u64"), std::string::npos)
        << msg;
}

TEST(gguf_reader_errors, n_dims_over_4) {
    builder f;
    f.header(1, 0).tensor("five.d", {1, 1, 1, 1, 1}, kF32, 0).pad(32).zeros(32);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'five.d': n_dims 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset "), std::string::npos) << msg;
    builder g;
    g.header(1, 0).tensor("zero.d", {}, kF32, 0).pad(32).zeros(32);
    EXPECT_NE(open_error(g.b).find("'zero.d': n_dims 0"), std::string::npos);
}

TEST(gguf_reader_errors, bad_ne) {
    builder f;
    f.header(1, 0).tensor("zero.ne", {4, 0}, kF32, 0).pad(32).zeros(32);
    EXPECT_NE(open_error(f.b).find("'zero.ne': ne[1] = 0"), std::string::npos);
    builder g;
    g.header(1, 0).tensor("neg.ne", {1ull << 63}, kF32, 0).pad(32).zeros(32);
    EXPECT_NE(open_error(g.b).find("'neg.ne': ne[0]"), std::string::npos);
    builder h;
    h.header(1, 0).tensor("overflow", {1ull << 40, 1ull << 40}, kF32, 0).pad(32).zeros(32);
    const std::string msg = open_error(h.b);
    EXPECT_NE(msg.find("'overflow': element count"), std::string::npos) << msg;
    builder i;  // element count fits, byte size does not
    i.header(1, 0).tensor("bytes.overflow", {1ull << 31, 1ull << 31}, kF32, 0).pad(32).zeros(32);
    EXPECT_NE(open_error(i.b).find("'bytes.overflow'"), std::string::npos);
}

TEST(gguf_reader_errors, unknown_tensor_type) {
    builder f;
    f.header(1, 0).tensor("blk.3.ffn_up_exps.weight", {32}, 2, 0).pad(32).zeros(64);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'blk.3.ffn_up_exps.weight': unknown tensor type id 2"), std::string::npos)
        << msg;
}

TEST(gguf_reader_errors, ne0_not_multiple_of_block) {
    builder f;
    f.header(1, 0)
        .tensor("q8.ragged", {33, 32}, static_cast<uint32_t>(ggml_type::Q8_0), 0)
        .pad(32)
        .zeros(34 * 33);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'q8.ragged'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiple of 32"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, misaligned_offset) {
    builder f;
    f.header(2, 0).tensor("a", {4}, kF32, 0).tensor("misaligned", {4}, kF32, 16).pad(32).zeros(64);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'misaligned': data offset 16 is not a multiple of the alignment 32"),
              std::string::npos)
        << msg;
}

TEST(gguf_reader_errors, data_past_end_of_file) {
    builder f;
    f.header(1, 0).tensor("blk.0.attn_q_a.weight", {8}, kF32, 32).pad(32);
    const uint64_t data_start = f.b.size();
    f.zeros(40);
    const std::string msg = open_error(f.b);
    const std::string want = "tensor 'blk.0.attn_q_a.weight': data [" +
                             std::to_string(data_start + 32) + ", " +
                             std::to_string(data_start + 64) + ") extends past end of file (" +
                             std::to_string(f.b.size()) + " bytes)";
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("crafted.gguf: offset ", 0), 0u) << msg;

    builder g;  // offset + size wraps around 2^64
    g.header(1, 0).tensor("wraps", {8}, kF32, ~0ull - 31).pad(32).zeros(32);
    EXPECT_NE(open_error(g.b).find("'wraps'"), std::string::npos);
}

TEST(gguf_reader_errors, data_section_past_end_of_file) {
    builder f;  // infos end mid-way; the padded data section start is beyond the file
    f.header(1, 0).tensor("t", {1}, kF32, 0);
    EXPECT_NE(open_error(f.b).find("'t': data ["), std::string::npos);
}

TEST(gguf_reader_errors, overlapping_tensors) {
    builder f;
    f.header(2, 0).tensor("first", {16}, kF32, 0).tensor("second", {8}, kF32, 32).pad(32).zeros(96);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("'second'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("overlaps tensor 'first'"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, duplicate_tensor) {
    builder f;
    f.header(2, 0).tensor("tok.weight", {8}, kF32, 0).tensor("tok.weight", {8}, kF32, 32);
    f.pad(32).zeros(64);
    const std::string msg = open_error(f.b);
    EXPECT_NE(msg.find("duplicate tensor name 'tok.weight'"), std::string::npos) << msg;
}

TEST(gguf_reader_errors, custom_alignment_governs_offsets) {
    builder f;  // offset 32 is fine for alignment 32 but not for 64
    f.header(2, 1).kv_u32("general.alignment", 64);
    f.tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad(64).zeros(128);
    EXPECT_NE(open_error(f.b).find("'b': data offset 32 is not a multiple of the alignment 64"),
              std::string::npos);
}

TEST(gguf_reader_errors, long_names_are_cut_short_in_messages) {
    const std::string name(10000, 'n');
    builder f;
    f.header(1, 0).tensor(name, {8}, 99, 0).pad(32).zeros(32);
    const std::string msg = open_error(f.b);
    EXPECT_LT(msg.size(), 400u);
    EXPECT_NE(msg.find("(10000 bytes)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace magnetar::gguf
