// Both ends of a consumer thread's online-softmax state in the
// warp-specialised attention. A thread holds rows g and g + 8 of its warp's
// 16-row slab (wgmma's accumulator layout, wgmma.cuh) and, per row, columns
// 8n + col + {0, 1} of O. The start is fresh (-inf, 0, 0) or the fp32 state
// read from global; the end stores that state unchanged (more K/V blocks
// follow: the next call continues bit for bit) or writes O = bf16(acc / l)
// with IEEE division and one RNE rounding, attention_finish's arithmetic.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/attention/attn_ws_sm90_params.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnWsEpilogue {
  int64_t row;  // the thread's first row (the second is row + 8)
  int64_t head;
  int col;  // 2 * (lane % 4): the thread's first column in each n8 block
  bool quad_leader;

  // P: AttnWsParams, or any struct with its state fields (rows, heads, m, l,
  // acc, out, ldo, fresh: the kvi8s mma.sync kernel's).
  template <class P = AttnWsParams>
  __device__ void load(const P& p, OnlineSoftmax& st, float (&acc)[T::kAccRegs]) const {
#pragma unroll
    for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
      const int64_t rr = row + r * 8;
      const bool read = !p.fresh && rr < p.rows;
      const int64_t sh = rr * p.heads + head;
      st.m[r] = read ? p.m[sh] : -kInf;
      st.l[r] = read ? p.l[sh] : 0.0f;
#pragma unroll
      for (int n = 0; n < T::kOBlocks; ++n) {
        float2 a = make_float2(0.0f, 0.0f);
        if (read) a = *reinterpret_cast<const float2*>(p.acc + sh * T::kHeadDim + n * 8 + col);
        acc[4 * n + 2 * r] = a.x;
        acc[4 * n + 2 * r + 1] = a.y;
      }
    }
  }

  template <class P = AttnWsParams>
  __device__ void store(const P& p, const OnlineSoftmax& st,
                        const float (&acc)[T::kAccRegs]) const {
#pragma unroll
    for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
      const int64_t rr = row + r * 8;
      if (rr >= p.rows) continue;
      if (p.out != nullptr) {
        const float denom = st.l[r];
        uint16_t* o = p.out + rr * p.ldo + head * T::kHeadDim + col;
#pragma unroll
        for (int n = 0; n < T::kOBlocks; ++n)
          *reinterpret_cast<uint32_t*>(o + n * 8) = arch::pack_bf16x2(
              __fdiv_rn(acc[4 * n + 2 * r], denom), __fdiv_rn(acc[4 * n + 2 * r + 1], denom));
        continue;
      }
      const int64_t sh = rr * p.heads + head;
      if (quad_leader) {  // the quad's 4 lanes hold the same m and l bits
        p.m[sh] = st.m[r];
        p.l[sh] = st.l[r];
      }
#pragma unroll
      for (int n = 0; n < T::kOBlocks; ++n)
        *reinterpret_cast<float2*>(p.acc + sh * T::kHeadDim + n * 8 + col) =
            make_float2(acc[4 * n + 2 * r], acc[4 * n + 2 * r + 1]);
    }
  }
};

}  // namespace h3s::cuda::attn
