// SafetensorsStreamWriter: a safetensors file written tensor by tensor, for
// files too large to hold in memory (a full-size checkpoint). The header is
// laid out first from the tensors' names, dtypes and shapes
// (safetensors_layout.hpp: the same layout write_safetensors gives), then
// the tensors' bytes follow in data order, each tensor in one or more pieces.
// The bytes go to "<path>.part", renamed to `path` by finish(): an
// interrupted run never leaves a file that looks complete (the .part file is
// removed when the writer is destroyed unfinished, and on SIGINT / SIGTERM).
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors_layout.hpp"

namespace h3s {

class SafetensorsStreamWriter {
 public:
  // Validates the tensors (Error(bad_input) naming `path` and the tensor),
  // then creates "<path>.part" (replacing a stale one) and writes the header.
  // A declared byte count must match the shape's.
  SafetensorsStreamWriter(std::string path, const std::vector<TensorDecl>& tensors,
                          const std::map<std::string, std::string>& metadata);
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  ~SafetensorsStreamWriter();

  const SafetensorsLayout& layout() const { return layout_; }
  const std::string& part_path() const { return part_; }
  // Data-section bytes written so far.
  size_t data_written() const { return written_; }

  // Appends `bytes` to tensor `name`: the tensors come in layout order, each
  // complete before the next begins (zero-byte tensors need no call).
  // Error(invalid_argument) on a tensor out of order or too many bytes;
  // Error(bad_input) naming the .part file and the system's reason when the
  // write fails (a full disk).
  void write(std::string_view name, std::span<const std::byte> bytes);
  // Checks that every tensor is complete, closes the file and renames it to
  // `path`.
  void finish();

 private:
  void write_all(const void* data, size_t n);
  // Closes and removes the .part file (an unfinished writer's end).
  void discard() noexcept;

  std::string path_, part_;
  SafetensorsLayout layout_;
  int fd_ = -1;
  size_t next_ = 0;       // the tensor being written (layout order)
  size_t in_tensor_ = 0;  // its bytes written so far
  size_t written_ = 0;
  bool finished_ = false;
  bool watching_ = false;  // the SIGINT / SIGTERM handler removes part_
};

}  // namespace h3s
