// The safetensors writer: the reference's layout, written atomically.
#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/output_file.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_format.hpp"

namespace h3s {

using namespace safetensors_format;

void write_safetensors(const std::string& path, const std::vector<WriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating any file.
  std::vector<const WriteEntry*> sorted;
  sorted.reserve(tensors.size());
  for (const WriteEntry& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const WriteEntry* a, const WriteEntry* b) { return a->name < b->name; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const WriteEntry& t = *sorted[i];
    check_tensor_name(path, t.name);
    if (i > 0 && sorted[i - 1]->name == t.name) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' given twice", path, t.name);
    }
    const size_t elem = dtype_size_or_fail(path, t.name, t.dtype);
    check_shape_bytes(path, t.name, t.dtype, t.shape, elem, t.bytes.size());
  }

  // The reference layout: tensors by element size (largest first), then name,
  // so every tensor starts aligned for its dtype and a reader can view it in
  // place (load_checkpoint's zero-copy arrays). ordered_json keeps metadata
  // first, then the tensors in data order, each as {dtype, shape, data_offsets}.
  std::stable_sort(sorted.begin(), sorted.end(), [](const WriteEntry* a, const WriteEntry* b) {
    return *safetensors_dtype_size(a->dtype) > *safetensors_dtype_size(b->dtype);
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  size_t offset = 0;
  for (const WriteEntry* t : sorted) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(ErrorKind::bad_input, "{}: cannot encode header ({})", path, e.what());
  }
  // Pad so the data section starts 8-byte aligned, as the reference does.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::array<char, 8> len{};
  for (size_t i = 0; i < 8; ++i) len[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xffu);

  write_file_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(len.data(), std::streamsize(len.size()));
    out.write(text.data(), std::streamsize(text.size()));
    for (const WriteEntry* t : sorted)
      out.write(reinterpret_cast<const char*>(t->bytes.data()), std::streamsize(t->bytes.size()));
    out.close();
    return !out.fail();
  });
}

}  // namespace h3s
