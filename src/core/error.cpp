#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace magnetar {

void assert_fail(const char* expr, const char* file, int line, const char* hint) {
    std::fprintf(stderr, "magnetar: internal assertion failed: %s\n  at %s:%d\n  %s\n", expr, file,
                 line, hint ? hint : "");
    std::fflush(stderr);
    std::abort();
}

}  // namespace magnetar
