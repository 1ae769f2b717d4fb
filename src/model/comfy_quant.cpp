// The per-layer quantisation JSON of ComfyUI's mixed-precision checkpoints.
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/checkpoint.hpp"

namespace h3s {

namespace {

// A field may sit at the top level or inside "params" (ComfyUI reads both).
const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (auto it = j.find(key); it != j.end()) return &*it;
  if (auto p = j.find("params"); p != j.end() && p->is_object())
    if (auto it = p->find(key); it != p->end()) return &*it;
  return nullptr;
}

int64_t int_field(const nlohmann::json& j, const char* key, int64_t def, const std::string& where) {
  const nlohmann::json* v = field(j, key);
  if (!v) return def;
  if (!v->is_number_integer())
    fail(ErrorKind::bad_input, "{}: quant config field \"{}\" must be an integer, found {}", where,
         key, v->dump());
  return v->get<int64_t>();
}

}  // namespace

LayerQuant parse_comfy_quant(std::string_view json, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::bad_input, "{}: quant config is not JSON ({})", where, e.what());
  }
  if (!j.is_object())
    fail(ErrorKind::bad_input, "{}: quant config must be a JSON object, found {}", where,
         j.type_name());
  const nlohmann::json* f = field(j, "format");
  if (!f || !f->is_string())
    fail(ErrorKind::bad_input, "{}: quant config has no \"format\" string", where);
  const std::string format = f->get<std::string>();
  LayerQuant q;
  if (format == "int8_tensorwise") {
    q.format = WeightFormat::int8;
  } else if (format == "asym_w4a8_int8") {
    q.format = WeightFormat::w4a8;
  } else if (format == "nvfp4") {
    q.format = WeightFormat::nvfp4;
  } else {
    fail(ErrorKind::bad_input,
         "{}: quant format \"{}\" is not supported (int8_tensorwise, asym_w4a8_int8, nvfp4)", where,
         format);
  }
  if (const nlohmann::json* c = field(j, "convrot")) {
    if (!c->is_boolean())
      fail(ErrorKind::bad_input, "{}: quant config field \"convrot\" must be true or false", where);
    q.convrot = c->get<bool>();
  }
  q.convrot_group = int_field(j, "convrot_groupsize", 256, where);
  q.group_size = int_field(j, "group_size", 16, where);
  if (q.format == WeightFormat::w4a8) q.convrot = true;  // asym_w4a8_int8 always rotates
  if (q.format == WeightFormat::int8 && !q.convrot)
    fail(ErrorKind::bad_input,
         "{}: int8_tensorwise without convrot is not supported (h3stream implements the ConvRot "
         "activation quantiser)",
         where);
  if (q.convrot && q.convrot_group != 256)
    fail(ErrorKind::bad_input, "{}: convrot_groupsize {} is not supported (expected 256)", where,
         q.convrot_group);
  if (const nlohmann::json* fp = field(j, "full_precision_matrix_mult")) {
    if (!fp->is_boolean())
      fail(ErrorKind::bad_input,
           "{}: quant config field \"full_precision_matrix_mult\" must be true or false, found {}",
           where, fp->dump());
    q.full_precision = fp->get<bool>();
  }
  if (q.format == WeightFormat::w4a8 && q.group_size != 16)
    fail(ErrorKind::bad_input, "{}: W4A8 group_size {} is not supported (expected 16)", where,
         q.group_size);
  return q;
}

std::string comfy_quant_json(WeightFormat f) {
  switch (f) {
    case WeightFormat::int8:
      return R"({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256})";
    case WeightFormat::w4a8:
      return R"({"format": "asym_w4a8_int8", "group_size": 16, "convrot_groupsize": 256})";
    case WeightFormat::nvfp4:
      return R"({"format": "nvfp4"})";
    default:
      fail(ErrorKind::internal, "format {} has no quant config", format_name(f));
  }
}

}  // namespace h3s
