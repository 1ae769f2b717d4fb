// The safetensors writer: the reference's layout, written atomically.
#include <fstream>

#include "core/error.hpp"
#include "model/output_file.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_layout.hpp"

namespace h3s {

void write_safetensors(const std::string& path, const std::vector<WriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating any file.
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  std::map<std::string_view, const WriteEntry*> by_name;
  for (const WriteEntry& t : tensors) {
    decls.push_back({t.name, t.dtype, t.shape, t.bytes.size()});
    by_name.emplace(t.name, &t);
  }
  const SafetensorsLayout layout = plan_safetensors_layout(path, decls, metadata);

  write_file_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(layout.head.data(), std::streamsize(layout.head.size()));
    for (const SafetensorsLayout::Placed& p : layout.tensors) {
      const std::span<const std::byte> b = by_name.at(p.decl.name)->bytes;
      out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    }
    out.close();
    return !out.fail();
  });
}

}  // namespace h3s
