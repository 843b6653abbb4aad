#include "core/host.h"

#include <unistd.h>

#include <fstream>

namespace magnetar {

uint64_t host_memory_bytes() {
    uint64_t mem = 0;
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) mem = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    for (const char* path :
         {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        std::ifstream f(path);
        unsigned long long limit = 0;
        // "max" (no limit) does not parse as a number.
        if (f >> limit && limit > 0 && (mem == 0 || limit < mem)) mem = limit;
    }
    return mem;
}

}  // namespace magnetar
