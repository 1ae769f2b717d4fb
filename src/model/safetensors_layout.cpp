// The safetensors file layout (safetensors_layout.hpp).
#include "model/safetensors_layout.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_format.hpp"

namespace h3s {

using namespace safetensors_format;

SafetensorsLayout plan_safetensors_layout(const std::string& path,
                                          const std::vector<TensorDecl>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorDecl*> sorted;
  sorted.reserve(tensors.size());
  for (const TensorDecl& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorDecl* a, const TensorDecl* b) { return a->name < b->name; });
  std::vector<size_t> bytes(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorDecl& t = *sorted[i];
    check_tensor_name(path, t.name);
    if (i > 0 && sorted[i - 1]->name == t.name)
      fail(ErrorKind::bad_input, "{}: tensor '{}' given twice", path, t.name);
    const size_t elem = dtype_size_or_fail(path, t.name, t.dtype);
    // Without given bytes the shape's own count is checked: its dimensions
    // non-negative and the product within size_t.
    bytes[i] = t.bytes ? *t.bytes : byte_count(t.shape, elem).value_or(0);
    check_shape_bytes(path, t.name, t.dtype, t.shape, elem, bytes[i]);
  }
  std::vector<size_t> order(sorted.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return *safetensors_dtype_size(sorted[a]->dtype) > *safetensors_dtype_size(sorted[b]->dtype);
  });

  SafetensorsLayout layout;
  layout.tensors.reserve(order.size());
  // ordered_json keeps metadata first, then the tensors in data order, each as
  // {dtype, shape, data_offsets}.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  size_t offset = 0;
  for (size_t i : order) {
    const TensorDecl& t = *sorted[i];
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes[i]}}};
    layout.tensors.push_back({t, offset, bytes[i]});
    offset += bytes[i];
  }
  layout.data_bytes = offset;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(ErrorKind::bad_input, "{}: cannot encode header ({})", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  layout.head.resize(8);
  for (size_t i = 0; i < 8; ++i) layout.head[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xffu);
  layout.head += text;
  return layout;
}

}  // namespace h3s
