// Argument checks the CUDA backend's op files share (beyond op_checks.hpp).
#pragma once

#include "backend/backend.hpp"

namespace h3s::cuda {

// An attention state the kernels can use: head_dim 128, contiguous fp32
// [rows, heads(, 128)] on the GPU (AttnState::allocate on a device arena).
void expect_attn_state(const AttnState& s, const char* op);

}  // namespace h3s::cuda
