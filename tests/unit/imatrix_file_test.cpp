// Importance-matrix files (tools/quantize/imatrix.h): the GGUF layout llama.cpp writes, round
// trips, exact merging and the legacy .dat reader.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quantize/imatrix.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

// Two weights: a dense one [5] seen by 6 rows, an expert tensor of 3 experts x 4 columns with
// one expert never routed to. Values are small integers / halves: exact in float.
imatrix::data sample() {
    imatrix::data d;
    imatrix::entry dense = imatrix::entry::zeros(5, 1);
    for (size_t i = 0; i < 5; ++i) dense.in_sum2[i] = 1.5 * static_cast<double>(i + 1);
    dense.counts = {6};
    imatrix::entry exps = imatrix::entry::zeros(4, 3);
    for (size_t i = 0; i < 12; ++i)
        exps.in_sum2[i] = i < 4 || i >= 8 ? static_cast<double>(i) : 0.0;
    exps.counts = {2, 0, 7};
    d.entries["blk.0.attn_q_a.weight"] = dense;
    d.entries["blk.0.ffn_down_exps.weight"] = exps;
    d.datasets = {"calib.txt"};
    d.chunk_count = 3;
    d.chunk_size = 16;
    return d;
}

void expect_same(const imatrix::data& a, const imatrix::data& b) {
    ASSERT_EQ(a.entries.size(), b.entries.size());
    for (const auto& [name, e] : a.entries) {
        const auto it = b.entries.find(name);
        ASSERT_NE(it, b.entries.end()) << name;
        EXPECT_EQ(e.n_per_row, it->second.n_per_row) << name;
        EXPECT_EQ(e.n_mat, it->second.n_mat) << name;
        EXPECT_EQ(e.in_sum2, it->second.in_sum2) << name;
        EXPECT_EQ(e.counts, it->second.counts) << name;
    }
    EXPECT_EQ(a.datasets, b.datasets);
    EXPECT_EQ(a.chunk_count, b.chunk_count);
    EXPECT_EQ(a.chunk_size, b.chunk_size);
}

TEST(ImatrixFile, GgufLayoutIsLlamaCpps) {
    const std::string path = test::temp_dir() + "/layout.gguf";
    imatrix::write(sample(), path);
    auto r = gguf::reader::open(path);
    EXPECT_EQ(r->find("general.type")->s, "imatrix");
    const gguf::value* ds = r->find("imatrix.datasets");
    ASSERT_NE(ds, nullptr);
    EXPECT_EQ(ds->type, gguf::value_type::array);
    ASSERT_EQ(ds->arr.size(), 1u);
    EXPECT_EQ(ds->arr[0].s, "calib.txt");
    EXPECT_EQ(r->find("imatrix.chunk_count")->type, gguf::value_type::u32);
    EXPECT_EQ(r->find("imatrix.chunk_count")->u, 3u);
    EXPECT_EQ(r->find("imatrix.chunk_size")->u, 16u);
    // Tensors in name order, F32, in_sum2 [n_per_row, n_mat] and counts [1, n_mat].
    const auto ts = r->tensors();
    ASSERT_EQ(ts.size(), 4u);
    EXPECT_EQ(ts[0].name, "blk.0.attn_q_a.weight.in_sum2");
    EXPECT_EQ(ts[0].shape_str(), "[5, 1]");
    EXPECT_EQ(ts[1].name, "blk.0.attn_q_a.weight.counts");
    EXPECT_EQ(ts[1].shape_str(), "[1, 1]");
    EXPECT_EQ(ts[2].name, "blk.0.ffn_down_exps.weight.in_sum2");
    EXPECT_EQ(ts[2].shape_str(), "[4, 3]");
    EXPECT_EQ(ts[3].name, "blk.0.ffn_down_exps.weight.counts");
    EXPECT_EQ(ts[3].shape_str(), "[1, 3]");
    for (const auto& t : ts) EXPECT_EQ(t.type, ggml_type::F32) << t.name;
    const auto* counts = reinterpret_cast<const float*>(r->tensor_data(ts[3]));
    EXPECT_EQ(counts[0], 2.0f);
    EXPECT_EQ(counts[1], 0.0f);
    EXPECT_EQ(counts[2], 7.0f);
}

TEST(ImatrixFile, RoundTrip) {
    const std::string path = test::temp_dir() + "/round.gguf";
    const imatrix::data d = sample();
    imatrix::write(d, path);
    expect_same(d, imatrix::read(path));
}

TEST(ImatrixFile, MergeAddsSumsAndCountsExactly) {
    const std::string a = test::temp_dir() + "/a.gguf", b = test::temp_dir() + "/b.gguf";
    imatrix::data da = sample();
    imatrix::data db = sample();
    db.entries.erase("blk.0.attn_q_a.weight");
    db.entries["output.weight"] = imatrix::entry::zeros(2, 1);
    db.entries["output.weight"].counts = {1};
    db.entries["blk.0.ffn_down_exps.weight"].counts = {1, 5, 0};
    db.datasets = {"more.txt"};
    db.chunk_count = 2;
    imatrix::write(da, a);
    imatrix::write(db, b);

    imatrix::data m = imatrix::read(a);
    imatrix::merge(m, imatrix::read(b));
    EXPECT_EQ(m.entries.size(), 3u);
    const imatrix::entry& e = m.entries.at("blk.0.ffn_down_exps.weight");
    EXPECT_EQ(e.counts, (std::vector<int64_t>{3, 5, 7}));
    for (size_t i = 0; i < e.in_sum2.size(); ++i)
        EXPECT_EQ(e.in_sum2[i], 2 * sample().entries.at("blk.0.ffn_down_exps.weight").in_sum2[i]);
    EXPECT_EQ(m.entries.at("blk.0.attn_q_a.weight").counts[0], 6);  // only in a
    EXPECT_EQ(m.entries.at("output.weight").counts[0], 1);          // only in b
    EXPECT_EQ(m.datasets, (std::vector<std::string>{"calib.txt", "more.txt"}));
    EXPECT_EQ(m.chunk_count, 5u);
    EXPECT_EQ(m.chunk_size, 16u);

    // Merging is order independent and survives a write / read.
    imatrix::data m2 = imatrix::read(b);
    imatrix::merge(m2, imatrix::read(a));
    const std::string mp = test::temp_dir() + "/m.gguf";
    imatrix::write(m, mp);
    EXPECT_EQ(imatrix::read(mp).entries.at("blk.0.ffn_down_exps.weight").counts,
              m2.entries.at("blk.0.ffn_down_exps.weight").counts);
    EXPECT_EQ(imatrix::read(mp).entries.at("blk.0.ffn_down_exps.weight").in_sum2,
              m2.entries.at("blk.0.ffn_down_exps.weight").in_sum2);

    // Means of the merged file weight each file by its rows.
    const std::vector<float> ms = imatrix::mean_squares(e);
    EXPECT_FLOAT_EQ(ms[0], 0.0f);
    EXPECT_FLOAT_EQ(ms[1], 2.0f * 1.0f / 3.0f);
    EXPECT_EQ(ms[4], 0.0f);  // expert 1: 5 rows (from b), all zero: no longer "unseen"
}

TEST(ImatrixFile, MergeRejectsShapeMismatch) {
    imatrix::data a = sample(), b = sample();
    b.entries["blk.0.attn_q_a.weight"] = imatrix::entry::zeros(6, 1);
    EXPECT_THROW(imatrix::merge(a, b), Error);
}

TEST(ImatrixFile, MeanSquaresOfUnseenMatricesAreOne) {
    const imatrix::data d = sample();
    const std::vector<float> ms = imatrix::mean_squares(d.entries.at("blk.0.ffn_down_exps.weight"));
    ASSERT_EQ(ms.size(), 12u);
    EXPECT_FLOAT_EQ(ms[1], 0.5f);  // 1 / 2 rows
    EXPECT_EQ(ms[4], 1.0f);        // expert 1 never routed to
    EXPECT_FLOAT_EQ(ms[9], 9.0f / 7.0f);
}

// GGML's legacy file: means times ncall, counted as ncall chunks of the assumed chunk size.
TEST(ImatrixFile, ReadsLegacyAndMergesItIntoExpertEntries) {
    std::vector<uint8_t> bytes;
    auto put = [&](const void* p, size_t n) {
        bytes.insert(bytes.end(), static_cast<const uint8_t*>(p),
                     static_cast<const uint8_t*>(p) + n);
    };
    const std::string name = "blk.0.ffn_down_exps.weight";
    const int32_t one = 1, len = static_cast<int32_t>(name.size()), ncall = 4, nval = 12;
    put(&one, 4);
    put(&len, 4);
    put(name.data(), name.size());
    put(&ncall, 4);
    put(&nval, 4);
    std::vector<float> vals(12);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = 4.0f * static_cast<float>(i);  // mean i
    put(vals.data(), vals.size() * 4);
    const int32_t chunks = 4, dlen = 8;
    put(&chunks, 4);
    put(&dlen, 4);
    put("wiki.txt", 8);
    const std::string path = test::temp_dir() + "/legacy.dat";
    test::write_file(path, bytes);

    const imatrix::data d = imatrix::read(path);
    ASSERT_EQ(d.entries.size(), 1u);
    const imatrix::entry& e = d.entries.at(name);
    EXPECT_EQ(e.n_mat, 1);
    EXPECT_EQ(e.counts[0], 4 * static_cast<int64_t>(imatrix::kLegacyChunkSize));
    const std::vector<float> ms = imatrix::mean_squares(e);
    for (size_t i = 0; i < ms.size(); ++i) EXPECT_FLOAT_EQ(ms[i], static_cast<float>(i));
    EXPECT_EQ(d.datasets, (std::vector<std::string>{"wiki.txt"}));
    EXPECT_EQ(d.chunk_count, 4u);

    imatrix::data m = sample();
    imatrix::merge(m, d);
    EXPECT_EQ(m.entries.at(name).counts, (std::vector<int64_t>{2 + 2048, 2048, 7 + 2048}));
}

TEST(ImatrixFile, RejectsCountsWithoutSums) {
    const std::string path = test::temp_dir() + "/bad.gguf";
    {
        gguf::writer w(path);
        w.add_tensor("x.weight.counts", ggml_type::F32, {1, 1});
        const float one = 1.0f;
        w.write_tensor_data(&one, 4);
        w.finish();
    }
    EXPECT_THROW(imatrix::read(path), Error);
}

}  // namespace
}  // namespace magnetar
