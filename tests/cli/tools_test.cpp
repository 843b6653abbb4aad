// `magnetar compare-reference` and `magnetar kv` on the tiny model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/cli_support.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"

namespace fs = std::filesystem;

namespace magnetar::test {
namespace {

TEST(CompareReference, ReportsEveryLayerAndAgreesOnTheArgmax) {
    const cmd_result r = run_magnetar("compare-reference -m " + shell_quote(cli_tiny_model()) +
                                      " -p 'Hello there' --first 6 -t 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    const uint32_t n_layer = cli_engine().info().n_layer;
    for (uint32_t il = 0; il < n_layer; ++il) {
        const std::string tag = "\nblk." + std::to_string(il) + " ";
        const size_t at = r.out.find(tag);
        ASSERT_NE(at, std::string::npos) << r.out;
        // F32 weights: both paths sum the same products, in different orders.
        const size_t eol = r.out.find('\n', at + 1);
        const std::string line = r.out.substr(at + 1, eol - at - 1);
        const double d = std::stod(line.substr(line.rfind(' ') + 1));
        EXPECT_LT(d, 1e-4) << line;
    }
    EXPECT_NE(r.out.find("argmax fast"), std::string::npos);
    EXPECT_EQ(r.out.find("(DIFFERENT)"), std::string::npos) << r.out;
    const cmd_result bad =
        run_magnetar("compare-reference -m " + shell_quote(cli_tiny_model()) + " --first 0");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("--first"), std::string::npos) << bad.err;
}

TEST(KvCommand, ListShowVerifyAndRemove) {
    const std::string dir =
        (fs::temp_directory_path() / ("magnetar-kv-cli-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    const Engine& e = cli_engine();
    std::vector<int32_t> toks;
    ASSERT_TRUE(e.tokenize_chat({{"user", std::string(400, 'x') + " tell me", ""}}, think_mode::off,
                                0, &toks)
                    .ok());
    std::string path;
    {
        session_options so;
        so.n_ctx = 1024;
        std::unique_ptr<Session> s;
        ASSERT_TRUE(e.create_session(so, &s).ok());
        ASSERT_TRUE(s->eval(toks).ok());
        kvstore::store_options o;
        o.dir = dir;
        o.min_tokens = 8;
        kvstore::store st(o, kvstore::identity_of_model(cli_tiny_model()));
        ASSERT_TRUE(st.save(*s, e.detokenize(toks), kvstore::save_reason::cold));
        path = st.entries().at(0).path;
    }
    const std::string name = kvstore::sha1_hex(e.detokenize(toks));
    cmd_result r = run_magnetar("kv ls " + shell_quote(dir));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(name.substr(0, 12)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::to_string(toks.size())), std::string::npos) << r.out;
    r = run_magnetar("kv show " + shell_quote(dir) + " " + name.substr(0, 8));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("reason:       cold"), std::string::npos) << r.out;
    r = run_magnetar("kv verify " + shell_quote(dir) + " -m " + shell_quote(cli_tiny_model()));
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("1 ok, 0 bad"), std::string::npos) << r.out;
    // A flipped payload byte: verify fails and names the file; ls still lists it (header ok).
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
        f.put('\x7f');
    }
    r = run_magnetar("kv verify " + shell_quote(dir));
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
    r = run_magnetar("kv rm " + shell_quote(dir) + " " + name.substr(0, 10));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_FALSE(fs::exists(path));
    r = run_magnetar("kv show " + shell_quote(dir) + " " + name.substr(0, 10));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("no file matches"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace magnetar::test
