// The checkpoint's key names, as one walk over ModelWeights shared by the
// reader and the writer (so the two can never disagree on a name).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/weights.hpp"

namespace h3s {

// How a linear is stored and computed.
enum class LinearRole : uint8_t {
  block,   // the four big block linears: any weight format
  plain,   // bf16 compute (condition_proj, full-form adaLN): plain or quantised
  island,  // fp32 island (patch projections, time embedder, heads, curve adaLN)
};

struct LinearSlot {
  std::string name;  // without ".weight"
  QuantLinear* q;
  int64_t out, in;
  bool bias;
  LinearRole role;
};
struct VectorSlot {  // a bf16 norm weight
  std::string name;  // full key
  WeightArray<uint16_t>* v;
  int64_t size;
};
struct F32Slot {  // an fp32 buffer (adaln_t_table, rope.inv_freq)
  std::string name;
  std::vector<float>* v;
  std::vector<int64_t> shape;
};

struct WeightSlots {
  std::vector<LinearSlot> linears;
  std::vector<VectorSlot> norms;
  std::vector<F32Slot> buffers;
};

// Slots of `w` for its config (w.blocks / w.refiner must already be sized).
WeightSlots weight_slots(ModelWeights& w);

}  // namespace h3s
