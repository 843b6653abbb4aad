// libFuzzer target: the server's request parser and per-endpoint schemas on arbitrary bodies.
//
// Contract: parse_request_json and validate_request either accept a body or throw api_error
// with status 400 and a message (for validation, starting with the offending field's path);
// never another exception, a crash, deep recursion or super-linear time. A body every
// endpoint's schema accepts is re-serialised and must parse and validate again the same way.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/request_schema.h"

namespace {

using namespace magnetar::server;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "request_fuzz: %s %s\n", what, detail.c_str());
    std::abort();
}

constexpr api_endpoint kEndpoints[] = {api_endpoint::chat_completions, api_endpoint::completions,
                                       api_endpoint::responses, api_endpoint::messages,
                                       api_endpoint::count_tokens};

// Validates against every endpoint; returns a bit per endpoint that accepted.
unsigned validate_all(const json& body) {
    unsigned accepted = 0;
    for (size_t i = 0; i < std::size(kEndpoints); ++i) {
        try {
            validate_request(kEndpoints[i], body);
            accepted |= 1u << i;
        } catch (const api_error& e) {
            if (e.status != 400 || std::string(e.what()).empty()) fail("bad refusal", e.what());
        }
    }
    return accepted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string body(reinterpret_cast<const char*>(data), size);
    json v;
    try {
        v = parse_request_json(body);
    } catch (const api_error& e) {
        if (e.status != 400) fail("parse refusal is not 400", e.what());
        return 0;
    }
    const unsigned accepted = validate_all(v);
    // A parsed body serialises and parses back to the same verdicts.
    json again;
    try {
        again = parse_request_json(v.dump());
    } catch (const api_error& e) {
        fail("a parsed body does not parse after dump()", e.what());
    }
    if (validate_all(again) != accepted) fail("verdicts changed after a round trip");
    return 0;
}
