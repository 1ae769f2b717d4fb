// Engine errors: one exception type whose message names the bad value and the fix.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace h3s {

enum class ErrorKind { invalid_argument, out_of_memory, bad_input, internal };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

// Internal invariant; a failure is a bug in h3stream, not in the caller's input.
#define H3S_CHECK(cond)                                                                   \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::h3s::fail(::h3s::ErrorKind::internal, "internal check failed: {} ({}:{})", #cond, \
                  __FILE__, __LINE__);                                                    \
  } while (0)

}  // namespace h3s
