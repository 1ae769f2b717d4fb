// comfy-kitchen's golden vectors (tests/data/golden, provenance and rules in
// the README there): one file's tensors by name, as typed host copies. The CPU
// op tests, the GPU tests and the loader tests read them through this, so a
// vector's path and its dtypes are spelled once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace h3s::test {

// tests/data/golden/<stem>.safetensors
inline std::string golden_path(const std::string& stem) {
  return std::string(H3S_TEST_DATA_DIR) + "/golden/" + stem + ".safetensors";
}

class Golden {
 public:
  explicit Golden(const std::string& stem) : f_(SafetensorsFile::open(golden_path(stem))) {}
  std::vector<uint16_t> bf16(const std::string& n) const { return f_.read_as<uint16_t>(n, "BF16"); }
  std::vector<float> f32(const std::string& n) const { return f_.read_as<float>(n, "F32"); }
  std::vector<int8_t> i8(const std::string& n) const { return f_.read_as<int8_t>(n, "I8"); }
  std::vector<uint8_t> bytes(const std::string& n, const char* dtype) const {
    return f_.read_as<uint8_t>(n, dtype);
  }
  const std::vector<int64_t>& shape(const std::string& n) const { return f_.entry(n).shape; }
  const SafetensorsFile& file() const { return f_; }

 private:
  SafetensorsFile f_;
};

}  // namespace h3s::test
