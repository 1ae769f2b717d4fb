// Per-row modulation index for the kernels that take `mod_row` (rms_norm_mod,
// gated_residual), built on the device from a call's ModRuns.
//
// Why on the device: the runs are a handful of (begin, end, row) triples,
// while the array is one int32 per row. Passing the triples by value in the
// launch needs no host staging buffer and no host-to-device copy, so nothing
// waits for the stream (a pageable cudaMemcpyAsync may).
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

// Runs per launch: 32 x 20 bytes, well inside the 4 KiB kernel-parameter space.
inline constexpr int kModRunBatch = 32;

struct ModRunBatch {
  int32_t count = 0;
  int64_t begin[kModRunBatch] = {}, end[kModRunBatch] = {};
  int32_t mod_row[kModRunBatch] = {};
};

// mod_row[r] = run.mod_row for r in [run.begin, run.end) of each run in
// `batch`. clear: every other row of [0, m) becomes -1 (the first batch of a
// call); later batches only write their own rows.
void fill_mod_rows(int32_t* mod_row, int64_t m, const ModRunBatch& batch, bool clear,
                   cudaStream_t s);

}  // namespace h3s::cuda
