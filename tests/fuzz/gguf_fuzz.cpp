// libFuzzer target for the GGUF reader.
//
// Owns: nothing but the harness. Parses the input straight from libFuzzer's buffer with
// reader::open_memory (the same validation open() runs after mmap), so a run costs no file
// I/O. The contract under test: either magnetar::Error, or a reader whose every tensor lies
// inside the input; any other exception, crash or sanitizer report is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace magnetar::gguf;
    try {
        auto r = reader::open_memory(data, size, "fuzz.gguf");
        // Touch the first and last byte of every tensor: ASan flags anything outside the
        // input buffer, which libFuzzer allocates at exactly `size` bytes.
        volatile uint8_t sink = 0;
        for (const tensor_info& t : r->tensors()) {
            const uint8_t* p = r->tensor_data(t);
            sink = sink + p[0] + p[t.n_bytes - 1];
            if (r->find_tensor(t.name) == nullptr) __builtin_trap();
        }
        for (const kv& e : r->metadata()) {
            if (r->find(e.key) == nullptr || !(e.val == e.val)) __builtin_trap();
        }
        (void)sink;
    } catch (const magnetar::Error&) {
        // Rejected cleanly: the expected outcome for most inputs.
    }
    return 0;
}
