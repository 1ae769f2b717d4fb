// Where every tensor of a safetensors file goes, decided from the tensors'
// names, dtypes and shapes alone: the header bytes and each tensor's offset.
// The in-memory writer (write_safetensors) and the streaming one
// (SafetensorsStreamWriter) both lay files out through it, so the same
// tensors give the same header and offsets whichever wrote them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace h3s {

struct TensorDecl {
  std::string name;
  std::string dtype;  // safetensors spelling, e.g. "BF16"
  std::vector<int64_t> shape;
  // The bytes the caller holds for it (checked against the shape), or
  // nullopt when the shape alone says how many will be written.
  std::optional<size_t> bytes;
};

struct SafetensorsLayout {
  struct Placed {
    TensorDecl decl;
    size_t offset = 0;  // into the data section
    size_t bytes = 0;
  };
  std::vector<Placed> tensors;  // in data order
  std::string head;             // the file's first bytes: 8-byte length + padded JSON
  size_t data_bytes = 0;

  size_t file_bytes() const { return head.size() + data_bytes; }
};

// The reference layout: tensors by element size (largest first), then name,
// so every tensor starts aligned for its dtype and a reader can view it in
// place; the JSON holds the metadata first, then the tensors in data order,
// padded with spaces so the data section starts 8-byte aligned. Validates
// names (not empty, not the metadata key, none twice), dtypes and shapes
// first: Error(bad_input) naming `path` and the tensor.
SafetensorsLayout plan_safetensors_layout(const std::string& path,
                                          const std::vector<TensorDecl>& tensors,
                                          const std::map<std::string, std::string>& metadata);

}  // namespace h3s
