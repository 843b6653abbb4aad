// `magnetar serve` refuses flag values it cannot serve with, through the real binary, before
// the model loads: a port outside 0..65535, a body limit that is not a finite size, an empty
// queue, no live session or a KV budget that is not a size, an empty API key (which would turn
// authentication off).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli/cli_support.h"

namespace magnetar::test {
namespace {

// A serve that must fail at once: exit `rc` (1; 2 for a usage error the parser finds) and one
// clear line naming `flag`.
void expect_refused(const std::string& args, const std::string& flag, int rc = 1) {
    const cmd_result r = run_magnetar("serve -m does-not-exist.gguf " + args);
    EXPECT_EQ(r.rc, rc) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("does-not-exist"), std::string::npos) << "model loaded first: " << r.err;
}

TEST(ServeFlags, PortOutOfRange) {
    expect_refused("--port 99999", "--port");
    expect_refused("--port 65536", "--port");
    expect_refused("--port -1", "--port");
}

TEST(ServeFlags, MaxBodyMustBeAFiniteSize) {
    for (const char* v : {"1e30", "-1", "0", "nan", "inf", "5000"}) {
        expect_refused(std::string("--max-body-mb ") + v, "--max-body-mb");
    }
}

TEST(ServeFlags, QueueAtLeastOne) {
    expect_refused("--queue 0", "--queue");
}

TEST(ServeFlags, ParallelSessionsAndTheirBudget) {
    expect_refused("--parallel 0", "--parallel: 0 is out of range", 2);
    expect_refused("--np 300", "--parallel: 300 is out of range", 2);
    for (const char* v : {"-1", "nan", "1e12"}) {
        expect_refused(std::string("--kv-memory-mb ") + v, "--kv-memory-mb");
    }
}

TEST(ServeFlags, TimeoutsMustBePositive) {
    expect_refused("--header-timeout-s 0", "--header-timeout-s");
    expect_refused("--body-timeout-s nan", "--body-timeout-s");
    expect_refused("--timeout 0", "-timeout-s");  // llama.cpp's --timeout sets both
}

TEST(ServeFlags, EmptyApiKeyIsAnError) {
    expect_refused("--api-key ''", "API key");
    ::setenv("MAGNETAR_API_KEY", "", 1);
    expect_refused("", "API key");
    ::unsetenv("MAGNETAR_API_KEY");
}

}  // namespace
}  // namespace magnetar::test
