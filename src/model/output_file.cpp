// Checked output paths and whole-or-nothing writes (output_file.hpp).
#include "model/output_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace h3s {

namespace fs = std::filesystem;

std::string checked_output_path(const std::string& path, const std::string& flag,
                                const std::vector<std::string>& inputs) {
  if (path.empty()) fail(ErrorKind::invalid_argument, "{}: no output path given", flag);
  std::error_code ec;
  // A symlink names the file to write: resolve it, so the rename below
  // replaces the target and keeps the link.
  const fs::path target = fs::weakly_canonical(fs::path(path), ec);
  if (ec)
    fail(ErrorKind::invalid_argument, "{} {}: cannot resolve the path ({})", flag, path,
         ec.message());
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st)) {
    if (!fs::is_regular_file(st))
      fail(ErrorKind::invalid_argument,
           "{} {}: {} exists and is not a regular file (a directory, device or FIFO): give a "
           "file path",
           flag, path, target.string());
    for (const std::string& in : inputs) {
      if (in.empty()) continue;
      std::error_code eq;
      if (fs::equivalent(target, fs::path(in), eq))
        fail(ErrorKind::invalid_argument,
             "{} {} is the input {}: writing it would destroy what the command reads; give "
             "another output path",
             flag, path, in);
    }
  }
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(dir, ec))
    fail(ErrorKind::invalid_argument, "{} {}: the directory {} does not exist: create it first",
         flag, path, dir.string());
  if (::access(dir.c_str(), W_OK) != 0)
    fail(ErrorKind::invalid_argument, "{} {}: cannot write into {} ({})", flag, path, dir.string(),
         std::strerror(errno));
  return target.string();
}

namespace {

// The temporary file being written, for the signal handler (a lock-free
// atomic: reading it and unlink() are async-signal-safe).
std::atomic<const char*> g_partial{nullptr};

extern "C" void remove_partial_file(int sig) {
  if (const char* p = g_partial.load()) ::unlink(p);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the handler for SIGINT and SIGTERM while a file is written and
// puts back what was there before.
class PartialFileGuard {
 public:
  explicit PartialFileGuard(const std::string& tmp) {
    g_partial.store(tmp.c_str());
    struct sigaction sa {};
    sa.sa_handler = remove_partial_file;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~PartialFileGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    g_partial.store(nullptr);
  }
  PartialFileGuard(const PartialFileGuard&) = delete;
  PartialFileGuard& operator=(const PartialFileGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace

void write_file_atomically(const std::string& path,
                           const std::function<bool(const std::string&)>& write) {
  // Unique per process and call: two runs writing the same output, or a
  // user's own "<path>.tmp", are never touched.
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      fmt::format("{}.h3s-tmp-{}-{}", path, static_cast<long>(::getpid()), counter++);
  bool ok = false;
  int err = 0;
  {
    const PartialFileGuard guard(tmp);
    try {
      errno = 0;
      ok = write(tmp);
      err = errno;
    } catch (...) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw;
    }
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    const std::string why =
        ok ? "rename failed: " + ec.message()
           : fmt::format("write failed: {}", err != 0 ? std::strerror(err) : "unknown error");
    fs::remove(tmp, ec);  // never leave a partial file behind
    fail(ErrorKind::bad_input, "{}: cannot write the file ({})", path, why);
  }
}

}  // namespace h3s
