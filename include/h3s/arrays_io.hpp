// Arrays to and from .safetensors files (the format of checkpoints, and of
// `h3s forward`'s inputs and outputs), for programs that embed h3stream.
#pragma once

#include <map>
#include <string>

#include "h3s/array.hpp"

namespace h3s {

// Every tensor of the file, copied into host arrays (BF16, F16, F32, I8, I32,
// U8, F8_E4M3; another dtype is an Error naming the tensor).
std::map<std::string, Array> load_arrays(const std::string& path);

// Writes the arrays (and header metadata); written to `path`.tmp and renamed,
// so a failure never leaves a partial file.
void save_arrays(const std::string& path, const std::map<std::string, Array>& arrays,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace h3s
