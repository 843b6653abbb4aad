// libFuzzer target for the DSML parsers.
//
// Owns: nothing but the harness; the checks live in tests/chat/dsml_check.h so the chat test
// suite runs the same body on mutated fixtures. The contract under test: the authoritative
// parse and the streaming projection never crash or throw on arbitrary bytes, any split of
// the bytes streams to the same result, the stream agrees with the final parse wherever the
// protocol promises it, and parsed calls render back to DSML that parses again.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "chat/dsml_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string err = magnetar::chat::check::fuzz_one(data, size);
    if (!err.empty()) {
        std::fprintf(stderr, "dsml_fuzz: %s\n", err.c_str());
        __builtin_trap();
    }
    return 0;
}
