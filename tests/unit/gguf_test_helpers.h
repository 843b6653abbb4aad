// Shared helper of the GGUF container tests (test_gguf.cpp and test_gguf_reader_errors.cpp):
// error_of, which runs a callable that must throw magnetar::Error and returns the message.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "core/error.h"

namespace magnetar::test {

// Runs f, which must throw magnetar::Error; returns the message. Any other outcome fails.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "expected magnetar::Error, got another exception: " << e.what();
        return {};
    }
    ADD_FAILURE() << "expected magnetar::Error, nothing was thrown";
    return {};
}

}  // namespace magnetar::test
