// A device's throughput figures as the placement planner uses them
// (exec/placement.cpp, staged_seconds): it orders the staged placements
// that fit by their estimated attention-phase time, so only the figures'
// ratios matter, never their absolute truth.
#pragma once

namespace h3s {

struct DeviceRates {
  double attention_flops;    // the attention kernel, FLOP/s
  double state_bytes_per_s;  // device memory, for the online-softmax state's round trips
  double bus_bytes_per_s;    // host <-> device through one copy stream
};

// Measured on the H200 at 217,088 tokens: attention ~650 TFLOP/s, HBM ~4 TB/s
// for the state, ~45 GB/s through the copy stream.
inline constexpr DeviceRates kH200Rates{650e12, 4.0e12, 45e9};

}  // namespace h3s
