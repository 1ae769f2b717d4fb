// The stored tensors of one linear layer (checkpoint_tensors.hpp).
#include "model/checkpoint_tensors.hpp"

#include "model/checkpoint.hpp"

namespace h3s {

std::vector<LinearTensor> linear_tensors(const LinearSlot& s, const LinearStorage& st) {
  std::vector<LinearTensor> t;
  const std::string w = s.name + ".weight";
  const int64_t out = s.out, in = s.in;
  switch (st.format) {
    case WeightFormat::f32:
      t.push_back({LinearPart::weight, w, "F32", {out, in}});
      break;
    case WeightFormat::bf16:
      t.push_back({LinearPart::weight, w, "BF16", {out, in}});
      break;
    case WeightFormat::int8:
      t.push_back({LinearPart::weight, w, "I8", {out, in}});
      t.push_back({LinearPart::scale, s.name + ".weight_scale", "F32", {out, 1}});
      break;
    case WeightFormat::w4a8:
      t.push_back({LinearPart::weight, w, "I8", {out, in / 2}});
      t.push_back({LinearPart::s_rel, s.name + ".weight_s_rel", "F8_E4M3", {out, in / kW4Group}});
      t.push_back({LinearPart::s_channel, s.name + ".weight_s_channel", "F32", {out}});
      if (st.codebook)
        t.push_back({LinearPart::codebook, s.name + ".weight_codebook", "F32", {16}});
      break;
    case WeightFormat::nvfp4: {
      const int64_t np = round_up(out, 16), kp = round_up(in, 16);
      t.push_back({LinearPart::weight, w, "U8", {np, kp / 2}});
      t.push_back({LinearPart::block_scale,
                   s.name + ".weight_scale",
                   "F8_E4M3",
                   {round_up(np, 128), round_up(kp / 16, 4)}});
      t.push_back({LinearPart::global, s.name + ".weight_scale_2", "F32", {}});
      break;
    }
  }
  if (st.format == WeightFormat::int8 || st.format == WeightFormat::w4a8 ||
      st.format == WeightFormat::nvfp4)
    t.push_back({LinearPart::comfy_quant,
                 s.name + ".comfy_quant",
                 "U8",
                 {int64_t(comfy_quant_json(st.format).size())}});
  if (s.bias)
    t.push_back({LinearPart::bias, s.name + ".bias", st.bias_bf16 ? "BF16" : "F32", {out}});
  return t;
}

}  // namespace h3s
