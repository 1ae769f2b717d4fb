// Host memory the process can still take, for the host budget of staged K/V and
// residual tiles (pinned on CUDA). A machine's MemAvailable is not the answer
// inside a container or a systemd scope: there the cgroup's memory.max binds
// first, and pinning past it gets the process killed, not refused.
#pragma once

#include <cstddef>
#include <string>

namespace h3s {

// Where the readings come from (tests point them at a fake tree).
struct HostMemorySources {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// min(MemAvailable, for every cgroup v2 level from this process's cgroup up to
// the root that sets memory.max: max - (current - file pages)), in bytes; file
// pages (the page cache, e.g. a mapped checkpoint) count as reclaimable. 0 when
// nothing can be read.
size_t available_host_memory(const HostMemorySources& from = {});

}  // namespace h3s
