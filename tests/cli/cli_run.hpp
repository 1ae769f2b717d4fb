// Runs the h3s binary as a user does (tests/cli): its exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace h3s::cli_test {

struct Result {
  int code = -1;
  std::string out;  // stdout, and stderr too when merged
};

inline Result run_cli(const std::string& args, bool merge_stderr = true) {
  const std::string cmd =
      std::string(H3S_CLI_PATH) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace h3s::cli_test
