// Facts about this host that several layers size their work by.
#pragma once

#include <cstdint>

namespace magnetar {

// Memory of this host: physical memory, or the cgroup limit when that is lower (containers);
// 0 when unknown.
uint64_t host_memory_bytes();

}  // namespace magnetar
