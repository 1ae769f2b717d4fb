// h3s::Error: the one exception type of h3stream. Its message names the bad
// value (the operand, its expected and found value) and the fix.
#pragma once

#include <stdexcept>
#include <string>

namespace h3s {

enum class ErrorKind {
  invalid_argument,  // a bad call: a control, shape, dtype or name the caller chose
  out_of_memory,     // a budget (arena, --vram-budget) too small for the work
  bad_input,         // a bad file or tensor: names the file or tensor
  internal,          // a bug in h3stream
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace h3s
