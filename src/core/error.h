// Error handling for the whole library.
//
// Owns: the exception type used on cold paths (load, parse, config, user input) and the
// MAGNETAR_ASSERT macro for internal invariants. Does not own: the public status type
// (include/magnetar), which converts these errors at the API boundary.
#pragma once

#include <stdexcept>
#include <string>

namespace magnetar {

// Thrown on cold paths. The message names the culprit (file, key, tensor, offset) and says
// what was expected versus what was found.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* hint);

}  // namespace magnetar

// Internal invariant: aborts with the expression, location and a hint. Never used for
// conditions that bad input can trigger.
#define MAGNETAR_ASSERT(expr, hint)                                            \
    do {                                                                       \
        if (!(expr)) ::magnetar::assert_fail(#expr, __FILE__, __LINE__, hint); \
    } while (0)
