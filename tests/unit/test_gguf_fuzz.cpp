// GGUF reader robustness: every truncation of a small valid file, deterministic random byte
// corruptions, and overwrites of every header field position with hostile counts/lengths/
// offsets. The reader must either open the bytes (with every tensor inside them) or throw
// magnetar::Error; any other exception, crash or sanitizer report fails the run.
//
// Also keeps the libFuzzer seeds in tests/fuzz/seeds honest: they must open, and setting
// MAGNETAR_REGEN_FUZZ_SEEDS=1 rewrites them from the generators below.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "support/test_support.h"

namespace magnetar::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> filler(size_t n, uint8_t seed) {
    std::vector<uint8_t> out(n);
    for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>(seed + k * 7);
    return out;
}

void write_tensors(writer& w, const std::vector<size_t>& sizes) {
    for (size_t k = 0; k < sizes.size(); ++k) {
        const auto d = filler(sizes[k], static_cast<uint8_t>(k));
        w.write_tensor_data(d.data(), d.size());
    }
}

// A few keys of every shape the model files use, and four small tensors. The last tensor's
// size is a multiple of the alignment, so the file ends exactly where its data ends and every
// truncation removes bytes that matter.
void write_sample(const std::string& path) {
    writer w(path);
    w.set("general.architecture", value::make_string("deepseek4"));
    w.set("deepseek4.block_count", value::make_u32(2));
    w.set("tokenizer.ggml.tokens",
          value::make_string_array({"<｜begin▁of▁sentence｜>", "a", "", "bc"}));
    w.set("deepseek4.attention.compress_ratios", value::make_i32_array({0, 4, 128}));
    w.set("nested",
          value::make_array(value_type::array, {value::make_i32_array({1, 2}),
                                                value::make_array(value_type::string, {})}));
    w.set("deepseek4.hyper_connection.epsilon", value::make_f32(1e-6f));
    w.set("deepseek4.expert_weights_norm", value::make_bool(true));
    w.add_tensor("output_norm.weight", ggml_type::F32, {8});
    w.add_tensor("blk.0.attn_q_a.weight", ggml_type::Q8_0, {32, 2});
    w.add_tensor("blk.0.hc_attn_fn.weight", ggml_type::F16, {4, 4});
    w.add_tensor("blk.0.ffn_gate_tid2eid.weight", ggml_type::I32, {8});
    write_tensors(w, {32, 68, 32, 32});
    w.finish();
}

// Second seed: version 2, alignment 64, deeper arrays, a K-quant tensor.
void write_seed_v2(const std::string& path) {
    writer w(path, 64, 2);
    w.set("general.name", value::make_string("tiny"));
    w.set("u64", value::make_u64(1ull << 40));
    w.set("f64", value::make_f64(0.5));
    w.set("deep", value::make_array(
                      value_type::array,
                      {value::make_array(value_type::array, {value::make_f32_array({1.0f})})}));
    w.add_tensor("q2", ggml_type::Q2_K, {256});
    w.add_tensor("bf", ggml_type::BF16, {2, 2, 2, 2});
    write_tensors(w, {84, 32});
    w.finish();
}

// Third seed: metadata only, every scalar type.
void write_seed_meta(const std::string& path) {
    writer w(path);
    w.set("u8", value::make_u8(1));
    w.set("i8", value::make_i8(-1));
    w.set("u16", value::make_u16(2));
    w.set("i16", value::make_i16(-2));
    w.set("u32", value::make_u32(3));
    w.set("i32", value::make_i32(-3));
    w.set("i64", value::make_i64(-4));
    w.set("bool", value::make_bool(false));
    w.set("merges", value::make_string_array({"a b", "c d"}));
    w.finish();
}

// Opens bytes from memory; on success checks every tensor lies inside them. Returns whether
// it opened. Anything thrown other than magnetar::Error fails the test.
bool open_checked(const std::vector<uint8_t>& bytes, const std::string& what) {
    try {
        auto r = reader::open_memory(bytes.data(), bytes.size(), "sample.gguf");
        const uint8_t* lo = bytes.data();
        const uint8_t* hi = bytes.data() + bytes.size();
        for (const tensor_info& t : r->tensors()) {
            const uint8_t* p = r->tensor_data(t);
            EXPECT_TRUE(p >= lo && p <= hi && t.n_bytes <= static_cast<uint64_t>(hi - p))
                << what << ": tensor '" << t.name << "' outside the buffer";
        }
        return true;
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("sample.gguf: ", 0), 0u) << what << ": " << msg;
        return false;
    } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": non-magnetar exception: " << e.what();
        return false;
    }
}

TEST(gguf_fuzz, every_truncation_is_a_clean_error) {
    const std::string dir = test::temp_dir();
    write_sample(dir + "/full.gguf");
    const auto full = test::read_file(dir + "/full.gguf");
    ASSERT_GT(full.size(), 300u);
    ASSERT_TRUE(open_checked(full, "untruncated"));

    const std::string cut = dir + "/cut.gguf";
    for (size_t len = 0; len < full.size(); ++len) {
        test::write_file(cut, std::vector<uint8_t>(full.begin(), full.begin() + len));
        try {
            reader::open(cut);
            ADD_FAILURE() << "truncation to " << len << " bytes opened";
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_EQ(msg.rfind(cut + ": offset ", 0), 0u) << len << ": " << msg;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "truncation to " << len << ": non-magnetar exception: " << e.what();
        }
    }
}

TEST(gguf_fuzz, random_byte_corruptions) {
    const std::string dir = test::temp_dir();
    write_sample(dir + "/full.gguf");
    const auto full = test::read_file(dir + "/full.gguf");
    std::mt19937 rng(12345);
    int opened = 0;
    for (int iter = 0; iter < 600; ++iter) {
        auto bytes = full;
        const int n_changes = 1 + static_cast<int>(rng() % 3);
        for (int c = 0; c < n_changes; ++c) {
            bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
        }
        opened += open_checked(bytes, "corruption #" + std::to_string(iter));
    }
    // Most single-byte hits land in tensor data, which the reader does not interpret.
    EXPECT_GT(opened, 0);
    EXPECT_LT(opened, 600);
}

TEST(gguf_fuzz, hostile_values_at_every_header_position) {
    const std::string dir = test::temp_dir();
    write_sample(dir + "/full.gguf");
    const auto full = test::read_file(dir + "/full.gguf");
    const uint64_t header_end = reader::open(dir + "/full.gguf")->data_offset();
    const uint64_t hostile64[] = {~0ull,       1ull << 60,      1ull << 63, 0x7fffffffffffffffull,
                                  full.size(), full.size() - 1, 0};
    const uint32_t hostile32[] = {0xffffffffu, 0x80000000u, 13, 9, 5, 2};
    for (uint64_t pos = 0; pos < header_end; ++pos) {
        for (uint64_t v : hostile64) {
            auto bytes = full;
            for (size_t k = 0; k < 8 && pos + k < bytes.size(); ++k) {
                bytes[pos + k] = static_cast<uint8_t>(v >> (8 * k));
            }
            open_checked(bytes, "u64 " + std::to_string(v) + " at " + std::to_string(pos));
        }
        for (uint32_t v : hostile32) {
            auto bytes = full;
            for (size_t k = 0; k < 4 && pos + k < bytes.size(); ++k) {
                bytes[pos + k] = static_cast<uint8_t>(v >> (8 * k));
            }
            open_checked(bytes, "u32 " + std::to_string(v) + " at " + std::to_string(pos));
        }
    }
}

TEST(gguf_fuzz, committed_seeds_open) {
    const fs::path seeds = fs::path(MAGNETAR_SOURCE_DIR) / "tests" / "fuzz" / "seeds";
    if (const char* e = std::getenv("MAGNETAR_REGEN_FUZZ_SEEDS"); e && std::string(e) == "1") {
        fs::create_directories(seeds);
        write_sample((seeds / "sample_v3.gguf").string());
        write_seed_v2((seeds / "align64_v2.gguf").string());
        write_seed_meta((seeds / "metadata_only.gguf").string());
    }
    int n = 0;
    for (const char* name : {"sample_v3.gguf", "align64_v2.gguf", "metadata_only.gguf"}) {
        const std::string path = (seeds / name).string();
        ASSERT_TRUE(fs::exists(path)) << path << " missing; regenerate with "
                                      << "MAGNETAR_REGEN_FUZZ_SEEDS=1";
        EXPECT_LE(fs::file_size(path), 4096u) << path;
        EXPECT_NO_THROW(reader::open(path)) << path;
        ++n;
    }
    EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace magnetar::gguf
