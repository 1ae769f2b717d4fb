// A fresh directory under the system temp dir for one test's files, removed
// with its contents (the model tests' checkpoints, safetensors and outputs).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace h3s::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "h3s_test") {
    static std::atomic<int> counter{0};
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(rd()) + "_" +
            std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::filesystem::path& path() const { return dir_; }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // The names in the directory, sorted (a finished or failed write leaves no
  // temporary file beside its output).
  std::vector<std::string> names() const { return names_in(dir_); }
  static std::vector<std::string> names_in(const std::filesystem::path& d) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(d))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace h3s::test
