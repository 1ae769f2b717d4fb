// Raising h3s::Error (include/h3s/error.hpp) with a formatted message, and
// the internal-invariant check.
#pragma once

#include <fmt/format.h>

#include <string>

#include "h3s/error.hpp"  // Error, ErrorKind: the public exception type

namespace h3s {

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
