// GGUF container tests: value constructors and comparison, writer -> reader round trips and
// writer misuse.
//
// The reader's specific error messages on hand-built files live in test_gguf_reader_errors.cpp,
// corruption sweeps (every truncation, random bytes) in test_gguf_fuzz.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "support/test_support.h"
#include "unit/gguf_test_helpers.h"

namespace magnetar::gguf {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_file;
using test::temp_dir;
using test::write_file;

// Deterministic filler so that each tensor's bytes differ.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> out(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : out) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<uint8_t>(x);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// value constructors, predicates, names
// ---------------------------------------------------------------------------------------------

TEST(gguf_value, constructors_and_predicates) {
    EXPECT_EQ(value::make_u8(200).u, 200u);
    EXPECT_EQ(value::make_i8(-5).i, -5);
    EXPECT_EQ(value::make_u16(65535).u, 65535u);
    EXPECT_EQ(value::make_i16(-32768).i, -32768);
    EXPECT_EQ(value::make_u32(0xffffffffu).u, 0xffffffffu);
    EXPECT_EQ(value::make_i32(std::numeric_limits<int32_t>::min()).i,
              std::numeric_limits<int32_t>::min());
    EXPECT_EQ(value::make_u64(~0ull).u, ~0ull);
    EXPECT_EQ(value::make_i64(std::numeric_limits<int64_t>::min()).i,
              std::numeric_limits<int64_t>::min());
    EXPECT_EQ(value::make_f32(1.5f).f, 1.5);
    EXPECT_EQ(value::make_f64(0.1).f, 0.1);
    EXPECT_EQ(value::make_bool(true).u, 1u);
    EXPECT_EQ(value::make_string("abc").s, "abc");

    for (const value& v :
         {value::make_u8(1), value::make_i8(1), value::make_u16(1), value::make_i16(1),
          value::make_u32(1), value::make_i32(1), value::make_u64(1), value::make_i64(1)}) {
        EXPECT_TRUE(v.is_integer()) << value_type_name(v.type);
        EXPECT_FALSE(v.is_float()) << value_type_name(v.type);
    }
    EXPECT_TRUE(value::make_f32(1).is_float());
    EXPECT_TRUE(value::make_f64(1).is_float());
    EXPECT_FALSE(value::make_f64(1).is_integer());
    EXPECT_FALSE(value::make_bool(true).is_integer());
    EXPECT_FALSE(value::make_string("1").is_integer());
    EXPECT_FALSE(value::make_i32_array({1}).is_integer());

    const value sa = value::make_string_array({"a", "", "c"});
    EXPECT_EQ(sa.type, value_type::array);
    EXPECT_EQ(sa.elem_type, value_type::string);
    ASSERT_EQ(sa.arr.size(), 3u);
    EXPECT_EQ(sa.arr[2].s, "c");
    EXPECT_EQ(value::make_i32_array({-1, 2}).arr[0].i, -1);
    EXPECT_EQ(value::make_f32_array({0.25f}).arr[0].f, 0.25);
}

TEST(gguf_value, equality) {
    EXPECT_EQ(value::make_u32(7), value::make_u32(7));
    EXPECT_NE(value::make_u32(7), value::make_u64(7));  // type is part of the value
    EXPECT_NE(value::make_u32(7), value::make_u32(8));
    EXPECT_NE(value::make_f32(1.0f), value::make_f64(1.0));
    EXPECT_EQ(value::make_f32(NAN), value::make_f32(NAN));
    EXPECT_NE(value::make_f64(0.0), value::make_f64(-0.0));
    EXPECT_EQ(value::make_string("x"), value::make_string("x"));
    EXPECT_NE(value::make_string("x"), value::make_string("y"));
    EXPECT_EQ(value::make_i32_array({1, 2}), value::make_i32_array({1, 2}));
    EXPECT_NE(value::make_i32_array({1, 2}), value::make_i32_array({1, 2, 3}));
    EXPECT_NE(value::make_array(value_type::u8, {}), value::make_array(value_type::i8, {}));
    // Members the type does not select do not take part.
    value a = value::make_u32(3);
    a.s = "ignored";
    EXPECT_EQ(a, value::make_u32(3));
}

TEST(gguf_value, names) {
    EXPECT_STREQ(value_type_name(value_type::u8), "u8");
    EXPECT_STREQ(value_type_name(value_type::boolean), "bool");
    EXPECT_STREQ(value_type_name(value_type::string), "string");
    EXPECT_STREQ(value_type_name(value_type::array), "array");
    EXPECT_STREQ(value_type_name(value_type::f64), "f64");
    EXPECT_STREQ(value_type_name(static_cast<value_type>(99)), "unknown");

    tensor_info t;
    t.n_dims = 2;
    t.ne[0] = 4096;
    t.ne[1] = 129280;
    EXPECT_EQ(t.shape_str(), "[4096, 129280]");
    EXPECT_EQ(t.n_elements(), int64_t{4096} * 129280);
    t.n_dims = 1;
    EXPECT_EQ(t.shape_str(), "[4096]");
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

std::vector<kv> all_value_kinds() {
    std::vector<kv> out;
    auto add = [&](const std::string& k, value v) { out.push_back({k, std::move(v)}); };
    add("t.u8", value::make_u8(255));
    add("t.i8", value::make_i8(-128));
    add("t.u16", value::make_u16(65535));
    add("t.i16", value::make_i16(-32768));
    add("t.u32", value::make_u32(0xfffffffeu));
    add("t.i32", value::make_i32(std::numeric_limits<int32_t>::min()));
    add("t.u64", value::make_u64(0xfedcba9876543210ull));
    add("t.i64", value::make_i64(std::numeric_limits<int64_t>::min()));
    add("t.f32", value::make_f32(-1.25e-7f));
    add("t.f32.inf", value::make_f32(INFINITY));
    add("t.f32.negzero", value::make_f32(-0.0f));
    add("t.f64", value::make_f64(3.141592653589793));
    add("t.f64.denormal", value::make_f64(4.9e-324));
    add("t.bool.true", value::make_bool(true));
    add("t.bool.false", value::make_bool(false));
    add("t.string", value::make_string("deepseek4"));
    add("t.string.empty", value::make_string(""));
    add("t.string.unicode", value::make_string("<｜begin▁of▁sentence｜> ünïcödé 🚀 ｜DSML｜"));
    add("t.string.nul", value::make_string(std::string("a\0b", 3)));
    add("t.arr.empty.u8", value::make_array(value_type::u8, {}));
    add("t.arr.empty.string", value::make_array(value_type::string, {}));
    add("t.arr.empty.array", value::make_array(value_type::array, {}));
    add("t.arr.u8", value::make_array(value_type::u8, {value::make_u8(0), value::make_u8(255)}));
    add("t.arr.i8", value::make_array(value_type::i8, {value::make_i8(-1)}));
    add("t.arr.u16", value::make_array(value_type::u16, {value::make_u16(7)}));
    add("t.arr.i16", value::make_array(value_type::i16, {value::make_i16(-7)}));
    add("t.arr.u32", value::make_array(value_type::u32, {value::make_u32(1), value::make_u32(2)}));
    add("t.arr.i32", value::make_i32_array({4, 128, 0, -1}));
    add("t.arr.u64", value::make_array(value_type::u64, {value::make_u64(~0ull)}));
    add("t.arr.i64", value::make_array(value_type::i64, {value::make_i64(-2)}));
    add("t.arr.f32", value::make_f32_array({10.0f, -0.5f}));
    add("t.arr.f64", value::make_array(value_type::f64, {value::make_f64(1e300)}));
    add("t.arr.bool",
        value::make_array(value_type::boolean, {value::make_bool(true), value::make_bool(false)}));
    add("t.arr.string", value::make_string_array({"a", "", "é", "<think>"}));
    // Arrays of arrays, three levels, with empty and differently typed inner arrays.
    value inner_a = value::make_i32_array({1, 2, 3});
    value inner_b = value::make_string_array({"x", ""});
    value inner_c = value::make_array(value_type::f64, {});
    value mid = value::make_array(value_type::array, {inner_a, inner_b, inner_c});
    add("t.arr.nested",
        value::make_array(value_type::array, {mid, value::make_array(value_type::array, {})}));
    return out;
}

struct tensor_spec {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
};

std::vector<tensor_spec> all_tensor_kinds() {
    return {
        {"f32.1d", ggml_type::F32, {7}},
        {"f16.2d", ggml_type::F16, {3, 5}},
        {"bf16.3d", ggml_type::BF16, {2, 3, 4}},
        {"q8_0.2d", ggml_type::Q8_0, {64, 3}},
        {"q2_k.2d", ggml_type::Q2_K, {256, 2}},
        {"q4_k.3d", ggml_type::Q4_K, {256, 1, 2}},
        {"iq2_xxs.4d", ggml_type::IQ2_XXS, {512, 1, 1, 2}},
        {"i32.4d", ggml_type::I32, {5, 1, 2, 1}},
        {"q8_k.2d", ggml_type::Q8_K, {256, 3}},
        {"blk.0.attn_q_a.weight", ggml_type::F32, {1}},
    };
}

uint64_t expected_bytes(const tensor_spec& s) {
    const type_traits& tr = type_traits_of(s.type);
    int64_t n = 1;
    for (int64_t d : s.ne) n *= d;
    return static_cast<uint64_t>(n) / tr.block_elems * tr.block_bytes;
}

void round_trip(uint32_t alignment, size_t chunk) {
    const std::string path = temp_dir() + "/rt.gguf";
    const auto kvs = all_value_kinds();
    const auto specs = all_tensor_kinds();
    std::vector<uint8_t> all_data;
    std::vector<std::vector<uint8_t>> per_tensor;
    for (size_t k = 0; k < specs.size(); ++k) {
        per_tensor.push_back(pattern(expected_bytes(specs[k]), static_cast<uint32_t>(k + 1)));
        all_data.insert(all_data.end(), per_tensor.back().begin(), per_tensor.back().end());
    }

    uint64_t planned = 0;
    {
        writer w(path, alignment);
        for (const kv& e : kvs) w.set(e.key, e.val);
        for (const auto& s : specs) w.add_tensor(s.name, s.type, s.ne);
        planned = w.planned_size();
        for (size_t pos = 0; pos < all_data.size(); pos += chunk) {
            w.write_tensor_data(all_data.data() + pos, std::min(chunk, all_data.size() - pos));
        }
        EXPECT_EQ(planned, w.planned_size());
        w.finish();
    }
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(fs::file_size(path), planned);

    auto r = reader::open(path);
    EXPECT_EQ(r->path(), path);
    EXPECT_EQ(r->version(), 3u);
    EXPECT_EQ(r->alignment(), alignment);
    EXPECT_EQ(r->file_size(), planned);
    EXPECT_EQ(r->data_offset() % alignment, 0u);

    // The writer adds general.alignment (first) only when it is not the default.
    std::vector<kv> expect = kvs;
    if (alignment != kDefaultAlignment) {
        expect.insert(expect.begin(), kv{"general.alignment", value::make_u32(alignment)});
    }
    ASSERT_EQ(r->metadata().size(), expect.size());
    for (size_t k = 0; k < expect.size(); ++k) {
        EXPECT_EQ(r->metadata()[k].key, expect[k].key);
        EXPECT_TRUE(r->metadata()[k].val == expect[k].val) << expect[k].key;
        const value* found = r->find(expect[k].key);
        ASSERT_NE(found, nullptr) << expect[k].key;
        EXPECT_TRUE(*found == expect[k].val) << expect[k].key;
    }
    EXPECT_EQ(r->find("no.such.key"), nullptr);
    EXPECT_EQ(r->find("general.alignment") != nullptr, alignment != kDefaultAlignment);

    ASSERT_EQ(r->tensors().size(), specs.size());
    for (size_t k = 0; k < specs.size(); ++k) {
        const tensor_info& t = r->tensors()[k];
        EXPECT_EQ(t.name, specs[k].name);
        EXPECT_EQ(t.type, specs[k].type);
        ASSERT_EQ(t.n_dims, specs[k].ne.size());
        for (int d = 0; d < kMaxDims; ++d) {
            const int64_t want = d < static_cast<int>(specs[k].ne.size()) ? specs[k].ne[d] : 1;
            EXPECT_EQ(t.ne[d], want) << t.name << " dim " << d;
        }
        EXPECT_EQ(t.n_bytes, per_tensor[k].size());
        EXPECT_EQ(t.offset % alignment, 0u);
        EXPECT_EQ(r->find_tensor(specs[k].name), &t);
        const uint8_t* p = r->tensor_data(t);
        EXPECT_EQ(std::memcmp(p, per_tensor[k].data(), per_tensor[k].size()), 0) << t.name;
        EXPECT_EQ((p - r->tensor_data(r->tensors()[0])) % alignment, 0);
    }
    EXPECT_EQ(r->find_tensor("missing"), nullptr);
}

TEST(gguf_round_trip, default_alignment_one_write) {
    round_trip(32, size_t{1} << 30);
}
TEST(gguf_round_trip, default_alignment_small_chunks) {
    round_trip(32, 7);
}
TEST(gguf_round_trip, alignment_64_chunks_span_tensors) {
    round_trip(64, 1000);
}
TEST(gguf_round_trip, alignment_1) {
    round_trip(1, 13);
}
TEST(gguf_round_trip, alignment_4096) {
    round_trip(4096, 333);
}

TEST(gguf_round_trip, big_tensor_goes_straight_to_the_file) {
    const std::string path = temp_dir() + "/big.gguf";
    const auto small = pattern(16, 1);
    const auto big = pattern(3u << 20, 2);  // larger than the writer's buffer
    {
        writer w(path);
        w.add_tensor("small", ggml_type::F32, {4});
        w.add_tensor("big", ggml_type::F32, {static_cast<int64_t>(big.size() / 4)});
        w.add_tensor("tail", ggml_type::F32, {4});
        w.write_tensor_data(small.data(), small.size());
        w.write_tensor_data(big.data(), big.size());
        w.write_tensor_data(small.data(), small.size());
        w.finish();
    }
    auto r = reader::open(path);
    ASSERT_EQ(r->tensors().size(), 3u);
    EXPECT_EQ(std::memcmp(r->tensor_data(*r->find_tensor("big")), big.data(), big.size()), 0);
    EXPECT_EQ(std::memcmp(r->tensor_data(*r->find_tensor("tail")), small.data(), 16), 0);
}

// A file with metadata and two tensors, for the ways open() can hold its bytes.
std::string held_file(const std::string& name, std::vector<uint8_t>* big) {
    const std::string path = temp_dir() + "/" + name;
    *big = pattern(5u << 20, 11);
    writer w(path);
    w.set("general.name", value::make_string("held"));
    w.add_tensor("big", ggml_type::F32, {static_cast<int64_t>(big->size() / 4)});
    w.add_tensor("tail", ggml_type::F32, {4});
    w.write_tensor_data(big->data(), big->size());
    w.write_tensor_data(big->data(), 16);
    w.finish();
    return path;
}

TEST(gguf_open, without_mmap_the_same_bytes_in_private_memory) {
    std::vector<uint8_t> big;
    const std::string path = held_file("private.gguf", &big);
    const auto mapped = reader::open(path);
    open_options o;
    o.mmap = false;
    uint64_t last = 0, calls = 0;
    std::string phase;
    o.on_progress = [&](const char* what, uint64_t done, uint64_t total) {
        phase = what;
        EXPECT_GT(done, last);
        EXPECT_EQ(total, mapped->file_size());
        last = done;
        ++calls;
    };
    const auto copy = reader::open(path, o);
    EXPECT_FALSE(mapped->in_private_memory());
    EXPECT_TRUE(copy->in_private_memory());
    EXPECT_EQ(phase, "reading");
    EXPECT_EQ(last, copy->file_size());
    EXPECT_GE(calls, 1u);
    ASSERT_EQ(copy->tensors().size(), 2u);
    EXPECT_EQ(copy->find("general.name")->s, "held");
    EXPECT_EQ(std::memcmp(copy->tensor_data(*copy->find_tensor("big")), big.data(), big.size()), 0);
    // The copy does not depend on the file any more.
    fs::remove(path);
    EXPECT_EQ(std::memcmp(copy->tensor_data(*copy->find_tensor("tail")), big.data(), 16), 0);
}

TEST(gguf_open, without_mmap_a_corrupt_file_fails_before_reading) {
    const std::string path = temp_dir() + "/corrupt-private.gguf";
    write_file(path, std::vector<uint8_t>{'G', 'G', 'U', 'F', 9, 0, 0, 0});
    open_options o;
    o.mmap = false;
    bool read = false;
    o.on_progress = [&](const char*, uint64_t, uint64_t) { read = true; };
    const std::string msg = error_of([&] { reader::open(path, o); });
    EXPECT_NE(msg.find("unsupported GGUF version 9"), std::string::npos) << msg;
    EXPECT_FALSE(read);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MAGNETAR_HAS_ASAN 1
#endif
#endif
#ifndef MAGNETAR_HAS_ASAN
#define MAGNETAR_HAS_ASAN 0
#endif

// Drops CAP_IPC_LOCK from this process (root may lock past any limit with it).
void drop_ipc_lock() {
    __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &head, data) != 0) return;
    const unsigned bit = CAP_IPC_LOCK;
    data[bit / 32].effective &= ~(1u << (bit % 32));
    data[bit / 32].permitted &= ~(1u << (bit % 32));
    ::syscall(SYS_capset, &head, data);
}

TEST(gguf_open, mlock_granted_or_explained) {
    std::vector<uint8_t> big;
    const std::string path = held_file("locked.gguf", &big);
    open_options o;
    o.mlock = true;
    const auto r = reader::open(path, o);
    // Granted here (5 MiB fits the usual limits) or refused with a reason; the bytes are there.
    EXPECT_NE(r->locked(), !r->lock_warning().empty()) << r->lock_warning();
    EXPECT_EQ(std::memcmp(r->tensor_data(*r->find_tensor("big")), big.data(), big.size()), 0);

    // In a child without the capability and with a locked-memory limit of zero, the lock is
    // refused and the reason names the limit; the file stays readable. (AddressSanitizer
    // replaces mlock with a call that does nothing and succeeds.)
#if defined(__SANITIZE_ADDRESS__) || MAGNETAR_HAS_ASAN
    GTEST_SKIP() << "mlock is a no-op under AddressSanitizer";
#endif
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(fds[0]);
        drop_ipc_lock();
        const rlimit zero{0, 0};
        ::setrlimit(RLIMIT_MEMLOCK, &zero);
        std::string out;
        try {
            const auto c = reader::open(path, o);
            out = (c->locked() ? "locked|" : "not locked|") + c->lock_warning() + "|" +
                  (std::memcmp(c->tensor_data(*c->find_tensor("big")), big.data(), big.size()) == 0
                       ? "same"
                       : "different");
        } catch (const std::exception& e) {
            out = std::string("threw|") + e.what();
        }
        const ssize_t n = ::write(fds[1], out.data(), out.size());
        ::_exit(n == static_cast<ssize_t>(out.size()) ? 0 : 1);
    }
    ::close(fds[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, n);
    ::close(fds[0]);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    EXPECT_EQ(
        got.rfind("not locked|cannot lock 5.00 MiB in RAM: the locked-memory limit is 0 B", 0), 0u)
        << got;
    EXPECT_TRUE(got.ends_with("|same")) << got;
}

TEST(gguf_round_trip, version_2_reads) {
    const std::string path = temp_dir() + "/v2.gguf";
    const auto data = pattern(34, 3);
    {
        writer w(path, kDefaultAlignment, 2);
        w.set("general.architecture", value::make_string("deepseek4"));
        w.add_tensor("q", ggml_type::Q8_0, {32});
        w.write_tensor_data(data.data(), data.size());
        w.finish();
    }
    auto r = reader::open(path);
    EXPECT_EQ(r->version(), 2u);
    EXPECT_EQ(r->find("general.architecture")->s, "deepseek4");
    EXPECT_EQ(std::memcmp(r->tensor_data(r->tensors()[0]), data.data(), data.size()), 0);
}

TEST(gguf_round_trip, metadata_only_file) {
    const std::string path = temp_dir() + "/meta.gguf";
    {
        writer w(path);
        w.set("a", value::make_u32(1));
        w.set("b", value::make_string("x"));
        w.set("a", value::make_u32(2));  // a repeated key replaces, keeping its place
        w.finish();
    }
    auto r = reader::open(path);
    ASSERT_EQ(r->metadata().size(), 2u);
    EXPECT_EQ(r->metadata()[0].key, "a");
    EXPECT_EQ(r->metadata()[0].val.u, 2u);
    EXPECT_TRUE(r->tensors().empty());
}

TEST(gguf_round_trip, explicit_alignment_key) {
    const std::string dir = temp_dir();
    {
        writer w(dir + "/a32.gguf");
        w.set("general.alignment", value::make_u32(32));
        w.finish();
    }
    EXPECT_NE(reader::open(dir + "/a32.gguf")->find("general.alignment"), nullptr);
    {
        writer w(dir + "/a128.gguf", 128);
        w.set("general.alignment", value::make_u32(128));
        w.set("x", value::make_u8(1));
        w.add_tensor("t", ggml_type::F32, {3});
        const auto d = pattern(12, 4);
        w.write_tensor_data(d.data(), d.size());
        w.finish();
    }
    auto r = reader::open(dir + "/a128.gguf");
    EXPECT_EQ(r->alignment(), 128u);
    EXPECT_EQ(r->metadata().size(), 2u);  // not added a second time
    EXPECT_EQ(r->metadata()[0].key, "general.alignment");
}

TEST(gguf_round_trip, finish_replaces_existing_file) {
    const std::string path = temp_dir() + "/replace.gguf";
    write_file(path, {'o', 'l', 'd'});
    {
        writer w(path);
        w.set("k", value::make_bool(true));
        w.finish();
    }
    EXPECT_TRUE(reader::open(path)->find("k")->u);
}

// ---------------------------------------------------------------------------------------------
// Writer misuse
// ---------------------------------------------------------------------------------------------

TEST(gguf_writer, too_many_bytes) {
    const std::string path = temp_dir() + "/many.gguf";
    writer w(path);
    w.add_tensor("t", ggml_type::F32, {4});
    const auto d = pattern(17, 5);
    EXPECT_NE(error_of([&] { w.write_tensor_data(d.data(), 17); }).find("only 16 bytes"),
              std::string::npos);
    w.write_tensor_data(d.data(), 16);
    EXPECT_NE(error_of([&] { w.write_tensor_data(d.data(), 1); }).find(path), std::string::npos);
    w.finish();
    EXPECT_EQ(reader::open(path)->tensors()[0].n_bytes, 16u);
}

TEST(gguf_writer, too_few_bytes_at_finish) {
    const std::string path = temp_dir() + "/few.gguf";
    {
        writer w(path);
        w.add_tensor("full", ggml_type::F32, {2});
        w.add_tensor("partial", ggml_type::F32, {4});
        const auto d = pattern(16, 6);
        w.write_tensor_data(d.data(), 12);
        const std::string msg = error_of([&] { w.finish(); });
        EXPECT_NE(msg.find("'partial' has 4 of 16 bytes"), std::string::npos) << msg;
    }
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(gguf_writer, duplicate_tensor_name) {
    writer w(temp_dir() + "/dup.gguf");
    w.add_tensor("x", ggml_type::F32, {1});
    EXPECT_NE(
        error_of([&] { w.add_tensor("x", ggml_type::F16, {2}); }).find("duplicate tensor name 'x'"),
        std::string::npos);
}

TEST(gguf_writer, bad_shapes) {
    writer w(temp_dir() + "/shape.gguf");
    EXPECT_NE(error_of([&] { w.add_tensor("q8", ggml_type::Q8_0, {33}); }).find("multiple of 32"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("q4k", ggml_type::Q4_K, {128, 2});
              }).find("'q4k'"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("zero", ggml_type::F32, {4, 0});
              }).find("'zero'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("neg", ggml_type::F32, {-4}); }).find("'neg'"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("five", ggml_type::F32, {1, 1, 1, 1, 1});
              }).find("5 dimensions"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("none", ggml_type::F32, std::span<const int64_t>());
              }).find("0 dimensions"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("huge", ggml_type::F32, {int64_t{1} << 40, int64_t{1} << 40});
              }).find("'huge'"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.add_tensor("type", static_cast<ggml_type>(2), {32});
              }).find("unknown tensor type id 2"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("", ggml_type::F32, {1}); }).find("empty"),
              std::string::npos);
}

TEST(gguf_writer, bad_metadata) {
    writer w(temp_dir() + "/meta.gguf", 64);
    EXPECT_NE(error_of([&] { w.set("", value::make_u8(1)); }).find("empty metadata key"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.set("general.alignment", value::make_u32(32)); }).find("64"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.set("general.alignment", value::make_u64(64));
              }).find("general.alignment"),
              std::string::npos);
    value mixed = value::make_array(value_type::u32, {value::make_u32(1), value::make_i32(2)});
    EXPECT_NE(error_of([&] { w.set("mixed", mixed); }).find("'mixed'[1]"), std::string::npos);
    value wide = value::make_u8(0);
    wide.u = 300;
    EXPECT_NE(error_of([&] { w.set("wide", wide); }).find("out of range"), std::string::npos);
    value big_f32 = value::make_f32(1.0f);
    big_f32.f = 1e300;
    EXPECT_NE(error_of([&] { w.set("big_f32", big_f32); }).find("out of range"), std::string::npos);
    value deep = value::make_u8(1);
    for (int d = 0; d < 9; ++d) deep = value::make_array(deep.type, {deep});
    EXPECT_NE(error_of([&] { w.set("deep", deep); }).find("nested deeper"), std::string::npos);
    EXPECT_NE(error_of([&] {
                  w.set("odd", value::make_array(static_cast<value_type>(42), {}));
              }).find("unknown array element type"),
              std::string::npos);
}

TEST(gguf_writer, directory_is_fixed_once_data_flows) {
    const std::string path = temp_dir() + "/fixed.gguf";
    writer w(path);
    w.add_tensor("a", ggml_type::F32, {2});
    const auto d = pattern(8, 7);
    w.write_tensor_data(d.data(), 4);
    EXPECT_NE(error_of([&] { w.set("late", value::make_u8(1)); }).find("'late'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("late", ggml_type::F32, {1}); }).find("'late'"),
              std::string::npos);
    w.write_tensor_data(d.data() + 4, 4);
    w.finish();
    EXPECT_NE(error_of([&] { w.finish(); }).find("after finish()"), std::string::npos);
    EXPECT_NE(error_of([&] { w.write_tensor_data(d.data(), 1); }).find("after finish()"),
              std::string::npos);
}

TEST(gguf_writer, destructor_without_finish_removes_tmp) {
    const std::string path = temp_dir() + "/abandoned.gguf";
    {
        writer w(path);
        w.set("k", value::make_u32(1));
        w.add_tensor("t", ggml_type::F32, {1});
        const float x = 1.0f;
        w.write_tensor_data(&x, sizeof x);
        EXPECT_TRUE(fs::exists(path + ".tmp"));
        EXPECT_FALSE(fs::exists(path));
    }
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
}

TEST(gguf_writer, bad_constructor_arguments) {
    const std::string dir = temp_dir();
    EXPECT_NE(error_of([&] { writer w(dir + "/a.gguf", 48); }).find("alignment 48"),
              std::string::npos);
    EXPECT_NE(error_of([&] { writer w(dir + "/a.gguf", 0); }).find("alignment 0"),
              std::string::npos);
    EXPECT_NE(error_of([&] { writer w(dir + "/a.gguf", 32, 1); }).find("version 1"),
              std::string::npos);
    const std::string missing = dir + "/no/such/dir/a.gguf";
    const std::string msg = error_of([&] { writer w(missing); });
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

// A failing write(2) must surface as a magnetar::Error naming the file. RLIMIT_FSIZE with
// SIGXFSZ ignored makes write() fail with EFBIG, the same path ENOSPC takes.
TEST(gguf_writer, write_failure_is_reported) {
    const std::string path = temp_dir() + "/limited.gguf";
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 1 << 20;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    std::string msg;
    {
        writer w(path);
        const auto big = pattern(2u << 20, 8);
        w.add_tensor("big", ggml_type::F32, {static_cast<int64_t>(big.size() / 4)});
        msg = error_of([&] {
            w.write_tensor_data(big.data(), big.size());
            w.finish();
        });
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
}

TEST(gguf_writer, remove_drops_a_key_before_data) {
    const std::string path = temp_dir() + "/remove.gguf";
    {
        writer w(path);
        w.set("a", value::make_u32(1));
        w.set("b", value::make_u32(2));
        EXPECT_TRUE(w.remove("a"));
        EXPECT_FALSE(w.remove("missing"));
        w.add_tensor("t", ggml_type::F32, {4});
        const float data[4] = {1, 2, 3, 4};
        w.write_tensor_data(data, sizeof data);
        EXPECT_FALSE(error_of([&] { w.remove("b"); }).empty());
        w.finish();
    }
    auto r = reader::open(path);
    EXPECT_EQ(r->find("a"), nullptr);
    ASSERT_NE(r->find("b"), nullptr);
    EXPECT_EQ(r->find("b")->u, 2u);
}

}  // namespace
}  // namespace magnetar::gguf
