// available_host_memory: MemAvailable capped by cgroup v2 limits, on fake trees
// (a container or a systemd scope with MemoryMax must bound the host budget).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/host_memory.hpp"

namespace h3s {
namespace {

namespace fs = std::filesystem;
constexpr size_t GiB = size_t(1) << 30;

class FakeTree {
 public:
  FakeTree()
      : root_(fs::temp_directory_path() / ("h3s_host_memory_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "cg");
  }
  ~FakeTree() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  HostMemorySources sources() const {
    return {(root_ / "meminfo").string(), (root_ / "self_cgroup").string(),
            (root_ / "cg").string()};
  }

 private:
  fs::path root_;
};

std::string meminfo_kb(size_t bytes) {
  return "MemTotal: 100000000 kB\nMemFree: 1 kB\nMemAvailable: " + std::to_string(bytes / 1024) +
         " kB\n";
}

TEST(HostMemory, MemAvailableWithoutACgroupLimit) {
  FakeTree t;
  t.write("meminfo", meminfo_kb(100 * GiB));
  t.write("self_cgroup", "0::/user.slice/run\n");
  t.write("cg/user.slice/run/memory.max", "max\n");
  EXPECT_EQ(available_host_memory(t.sources()), 100 * GiB);
}

TEST(HostMemory, TheTightestCgroupLevelBindsAndPageCacheIsReclaimable) {
  FakeTree t;
  t.write("meminfo", meminfo_kb(100 * GiB));
  t.write("self_cgroup", "0::/outer/inner\n");
  // inner: 32 GiB limit, 20 GiB charged of which 12 GiB page cache (a mapped
  // checkpoint): 32 - (20 - 12) = 24 GiB left
  t.write("cg/outer/inner/memory.max", std::to_string(32 * GiB));
  t.write("cg/outer/inner/memory.current", std::to_string(20 * GiB));
  t.write("cg/outer/inner/memory.stat", "anon 8\nfile " + std::to_string(12 * GiB) + "\n");
  // outer: 40 GiB limit with 30 GiB of anonymous memory charged: 10 GiB left binds
  t.write("cg/outer/memory.max", std::to_string(40 * GiB));
  t.write("cg/outer/memory.current", std::to_string(30 * GiB));
  t.write("cg/outer/memory.stat", "file 0\n");
  EXPECT_EQ(available_host_memory(t.sources()), 10 * GiB);
  t.write("cg/outer/memory.max", "max");
  EXPECT_EQ(available_host_memory(t.sources()), 24 * GiB);
}

TEST(HostMemory, AFullCgroupLeavesNothingAndMissingFilesLeaveMemAvailable) {
  FakeTree t;
  t.write("meminfo", meminfo_kb(7 * GiB));
  t.write("self_cgroup", "0::/scope\n");
  t.write("cg/scope/memory.max", std::to_string(4 * GiB));
  t.write("cg/scope/memory.current", std::to_string(5 * GiB));  // over the limit (reclaim due)
  EXPECT_EQ(available_host_memory(t.sources()), 0u);
  t.write("self_cgroup", "1:name=systemd:/x\n");  // cgroup v1 only: no v2 line
  EXPECT_EQ(available_host_memory(t.sources()), 7 * GiB);
  EXPECT_EQ(available_host_memory({"/nonexistent/meminfo", "/nonexistent/cg", "/nonexistent"}), 0u);
}

}  // namespace
}  // namespace h3s
