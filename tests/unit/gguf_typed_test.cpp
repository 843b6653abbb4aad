// The typed metadata getters of gguf/typed.h: required keys throw with the file, the key and
// expected-versus-found; optional keys give the default only when absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "gguf/typed.h"

namespace magnetar::gguf {
namespace {

class TypedGetters : public ::testing::Test {
  protected:
    void SetUp() override {
        path_ = (std::filesystem::temp_directory_path() /
                 ("magnetar-typed-" + std::to_string(::getpid()) + ".gguf"))
                    .string();
        writer w(path_);
        w.set("k.u32", value::make_u32(7));
        w.set("k.u64", value::make_u64(uint64_t{1} << 40));
        w.set("k.i32", value::make_i32(-3));
        w.set("k.f32", value::make_f32(0.5f));
        w.set("k.bool", value::make_bool(true));
        w.set("k.str", value::make_string("x"));
        w.set("k.ratios", value::make_i32_array({0, 4, 128}));
        w.set("k.negative", value::make_i32_array({4, -1}));
        w.set("k.floats", value::make_f32_array({1.5f, 2.5f}));
        w.finish();
        f_ = reader::open(path_);
    }
    void TearDown() override {
        f_.reset();
        std::filesystem::remove(path_);
    }
    // The message of the Error `fn` throws ("" when it does not throw).
    template <typename F>
    std::string error_of(F fn) {
        try {
            fn();
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    std::string path_;
    std::unique_ptr<reader> f_;
};

TEST_F(TypedGetters, ReadTheirTypes) {
    EXPECT_EQ(get_u32(*f_, "k.u32"), 7u);
    EXPECT_EQ(get_u32_or_u64(*f_, "k.u32"), 7u);
    EXPECT_EQ(get_u32_or_u64(*f_, "k.u64"), uint64_t{1} << 40);
    EXPECT_EQ(get_float(*f_, "k.f32"), 0.5f);
    EXPECT_EQ(get_float(*f_, "k.u32"), 7.0f);
    EXPECT_EQ(get_float(*f_, "k.i32"), -3.0f);
    EXPECT_TRUE(get_bool(*f_, "k.bool"));
    EXPECT_EQ(get_u32_array(*f_, "k.ratios"), (std::vector<uint32_t>{0, 4, 128}));
    EXPECT_EQ(get_f32_array(*f_, "k.floats"), (std::vector<float>{1.5f, 2.5f}));
    EXPECT_EQ(require(*f_, "k.str").s, "x");
}

TEST_F(TypedGetters, OptionalKeysDefaultOnlyWhenAbsent) {
    EXPECT_EQ(get_u32_opt(*f_, "k.absent", 9), 9u);
    EXPECT_EQ(get_u32_opt(*f_, "k.u32", 9), 7u);
    // Present with the wrong type is an error, not the default.
    EXPECT_NE(error_of([&] { get_u32_opt(*f_, "k.str", 9); }).find("expected type u32, got string"),
              std::string::npos);
}

TEST_F(TypedGetters, ErrorsNameFileKeyAndTypes) {
    const std::string missing = error_of([&] { get_u32(*f_, "k.absent"); });
    EXPECT_NE(missing.find(path_), std::string::npos) << missing;
    EXPECT_NE(missing.find("metadata key 'k.absent': required key is missing"), std::string::npos)
        << missing;
    EXPECT_NE(error_of([&] { get_u32(*f_, "k.u64"); }).find("expected type u32, got u64"),
              std::string::npos);
    EXPECT_NE(error_of([&] { get_u32_or_u64(*f_, "k.f32"); }).find("expected type u32 or u64"),
              std::string::npos);
    EXPECT_NE(error_of([&] { get_float(*f_, "k.str"); }).find("expected type f32, f64, u32 or i32"),
              std::string::npos);
    EXPECT_NE(error_of([&] { get_bool(*f_, "k.u32"); }).find("expected type bool, got u32"),
              std::string::npos);
    EXPECT_NE(error_of([&] { get_u32_array(*f_, "k.negative"); }).find("entry 1 is negative (-1)"),
              std::string::npos);
    EXPECT_NE(
        error_of([&] { get_u32_array(*f_, "k.floats"); }).find("expected an array of i32 or u32"),
        std::string::npos);
    EXPECT_NE(
        error_of([&] { get_f32_array(*f_, "k.ratios"); }).find("expected an array of f32 or f64"),
        std::string::npos);
}

}  // namespace
}  // namespace magnetar::gguf
