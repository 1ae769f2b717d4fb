// Host memory available to this process: MemAvailable capped by cgroup v2 limits.
#include "core/host_memory.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

namespace h3s {

namespace {

std::optional<size_t> meminfo_available(const std::string& path) {
  std::ifstream f(path);
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return std::nullopt;
}

// A file holding one number, or "max" (no limit: nullopt).
std::optional<size_t> read_number(const std::string& path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return std::nullopt;
  try {
    return size_t(std::stoull(v));
  } catch (...) {
    return std::nullopt;
  }
}

// memory.stat's "file" line: the cgroup's page-cache bytes.
size_t file_pages(const std::string& stat_path) {
  std::ifstream f(stat_path);
  std::string key;
  size_t v = 0;
  while (f >> key >> v)
    if (key == "file") return v;
  return 0;
}

// This process's cgroup v2 path ("0::/a/b" -> "/a/b"), or nullopt.
std::optional<std::string> own_cgroup(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

}  // namespace

size_t available_host_memory(const HostMemorySources& from) {
  size_t best = meminfo_available(from.meminfo).value_or(std::numeric_limits<size_t>::max());
  if (const auto cg = own_cgroup(from.self_cgroup)) {
    std::string rel = *cg;
    while (true) {
      const std::string dir = from.cgroup_root + (rel == "/" ? "" : rel);
      if (const auto limit = read_number(dir + "/memory.max")) {
        const size_t current = read_number(dir + "/memory.current").value_or(0);
        const size_t file = std::min(current, file_pages(dir + "/memory.stat"));
        const size_t used = current - file;
        best = std::min(best, *limit > used ? *limit - used : size_t(0));
      }
      if (rel.empty() || rel == "/") break;
      const size_t slash = rel.find_last_of('/');
      rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
    }
  }
  return best == std::numeric_limits<size_t>::max() ? 0 : best;
}

}  // namespace h3s
