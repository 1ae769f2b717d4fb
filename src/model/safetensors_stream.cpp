// The streaming safetensors writer (safetensors_stream.hpp).
#include "model/safetensors_stream.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace h3s {

namespace {

// The .part file being written, for the signal handler (a lock-free atomic:
// reading it and unlink() are async-signal-safe).
std::atomic<const char*> g_part{nullptr};
struct sigaction g_old_int {};
struct sigaction g_old_term {};

extern "C" void remove_part_file(int sig) {
  if (const char* p = g_part.load()) ::unlink(p);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the handler while `part` is written (one file at a time: a second
// writer in the same process runs without it).
bool watch_part_file(const std::string& part) {
  const char* none = nullptr;
  if (!g_part.compare_exchange_strong(none, part.c_str())) return false;
  struct sigaction sa {};
  sa.sa_handler = remove_part_file;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  return true;
}

void unwatch_part_file() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_part.store(nullptr);
}

// One write() moves at most this much (Linux moves at most ~2 GiB a call).
constexpr size_t kMaxWriteCall = size_t(1) << 30;

}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path,
                                                 const std::vector<TensorDecl>& tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)),
      part_(path_ + ".part"),
      layout_(plan_safetensors_layout(path_, tensors, metadata)) {
  fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0)
    fail(ErrorKind::bad_input, "{}: cannot create the file ({})", part_, std::strerror(errno));
  watching_ = watch_part_file(part_);
  try {
    write_all(layout_.head.data(), layout_.head.size());
  } catch (...) {
    discard();
    throw;
  }
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (!finished_) discard();
}

void SafetensorsStreamWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(part_.c_str());
  if (watching_) unwatch_part_file();
  watching_ = false;
}

void SafetensorsStreamWriter::write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  size_t left = n;
  while (left > 0) {
    const ssize_t w = ::write(fd_, p, std::min(left, kMaxWriteCall));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::bad_input, "{}: cannot write the file ({}) after {} of {} bytes", part_,
           std::strerror(errno), layout_.head.size() + written_ + (n - left), layout_.file_bytes());
    }
    p += w;
    left -= size_t(w);
  }
}

void SafetensorsStreamWriter::write(std::string_view name, std::span<const std::byte> bytes) {
  if (finished_ || fd_ < 0)
    fail(ErrorKind::invalid_argument, "{}: tensor '{}' written after the file was closed", path_,
         name);
  const auto& t = layout_.tensors;
  // Past complete tensors to `name` (later tensors are untouched, so only
  // zero-byte ones are complete).
  size_t i = next_;
  while (i < t.size() && t[i].decl.name != name &&
         (i == next_ ? in_tensor_ == t[i].bytes : t[i].bytes == 0))
    ++i;
  if (i == t.size() || t[i].decl.name != name)
    fail(ErrorKind::invalid_argument,
         "{}: tensor '{}' written out of order: the file's data order expects '{}' next", path_,
         name, i < t.size() ? t[i].decl.name : std::string("no more tensors"));
  if (i != next_) {
    next_ = i;
    in_tensor_ = 0;
  }
  if (bytes.size() > t[i].bytes - in_tensor_)
    fail(ErrorKind::invalid_argument,
         "{}: tensor '{}' given {} more bytes with {} of its {} already written", path_, name,
         bytes.size(), in_tensor_, t[i].bytes);
  write_all(bytes.data(), bytes.size());
  in_tensor_ += bytes.size();
  written_ += bytes.size();
}

void SafetensorsStreamWriter::finish() {
  if (finished_) return;
  if (written_ != layout_.data_bytes) {
    const auto& t = layout_.tensors;
    size_t i = next_;
    while (i < t.size() && (i == next_ ? in_tensor_ == t[i].bytes : t[i].bytes == 0)) ++i;
    fail(ErrorKind::invalid_argument,
         "{}: finished with {} of {} data bytes written (tensor '{}' incomplete)", path_, written_,
         layout_.data_bytes, i < t.size() ? t[i].decl.name : std::string("?"));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    fail(ErrorKind::bad_input, "{}: cannot write the file ({})", part_, std::strerror(errno));
  if (std::rename(part_.c_str(), path_.c_str()) != 0)
    fail(ErrorKind::bad_input, "{}: cannot rename {} to it ({})", path_, part_,
         std::strerror(errno));
  finished_ = true;
  if (watching_) unwatch_part_file();
  watching_ = false;
}

}  // namespace h3s
