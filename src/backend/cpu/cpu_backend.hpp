// CpuBackend: the reference implementation of every op (plain C++20 and a
// thread pool). Each op lives in its own file in this folder; the arithmetic
// of one output row is a fixed sequence of fp32 operations (see math.hpp and
// core/dot_f32.hpp), so results do not depend on the chunking, the thread
// count or the row's position in a call.
#pragma once

#include "backend/backend.hpp"
#include "backend/op_checks.hpp"
#include "core/thread_pool.hpp"

namespace h3s::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::host; }
  ThreadPool& pool() { return pool_; }
  ThreadPool* host_pool() override { return &pool_; }

  void rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                    std::span<const ModRun> runs, const Tensor& out) override;
  void linear(const Tensor& x, const QuantLinear& w, const Tensor& y,
              RowRange features = {}) override;
  void swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) override;
  void qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                    int64_t rot_dim) override;
  void attn_state_reset(AttnState& s) override;
  void attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) override;
  void attn_state_finish(const AttnState& s, const Tensor& out) override;
  // The approximate tiers: kvi8r (kv_tiers.cpp; kvfmt/kvi8r.hpp is the
  // arithmetic), kvi8s (kv_tier_i8s.cpp; kvfmt/kvi8s.hpp) and kvfp4s
  // (kv_tier_fp4s.cpp; kvfmt/kvfp4s.hpp); kvmix is the last two (kv/kv_mix.hpp).
  bool has_kv_tier(KvTier /*tier*/) const override { return true; }
  void kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale) override;
  void rotate_heads(const Tensor& t) override;
  void attention_kvi8r(const Tensor& q_rot, const KvI8View& kv, RowRange keys,
                       AttnState& s) override;
  void attn_state_finish_rotated(const AttnState& s, const Tensor& out) override;
  void kvi8r_decode(const KvI8View& kv, RowRange keys, const Tensor& k, const Tensor& v) override;
  void kvi8s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                      int64_t first_row, const KvI8sView& out) override;
  void attention_kvi8s(const Tensor& q_rot, const KvI8sView& kv, RowRange keys,
                       AttnState& s) override;
  void kvfp4s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                       int64_t first_row, const KvFp4sView& out) override;
  void attention_kvfp4s(const Tensor& q_rot, const KvFp4sView& kv, RowRange keys,
                        AttnState& s) override;
  void kvfp4s_decode(const KvFp4sView& kv, RowRange keys, const Tensor& k,
                     const Tensor& v) override;
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                      std::span<const ModRun> runs) override;
  void add_residual(const Tensor& x, const Tensor& y) override;
  void silu(const Tensor& x, const Tensor& y) override;
  void convert(const Tensor& x, const Tensor& y) override;
  void copy(const Tensor& x, const Tensor& y) override;
  void scale(const Tensor& x, float alpha) override;
  // Weights (weights.cpp): host memory is this backend's memory.
  std::unique_ptr<WeightStore> make_weight_store(std::string name, size_t capacity) override;
  QuantLinear prepare(const QuantLinear& src, Residency r, WeightStore& store) override;
  WeightArray<uint16_t> prepare(const WeightArray<uint16_t>& src, Residency r,
                                WeightStore& store) override;
  size_t prepared_bytes(const QuantLinear& src, Residency r) const override;
  size_t prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const override;
  // Staging (stage_queue.cpp): the heap, budgeted as a second pool.
  MemoryResource& host_staging_memory() override;
  std::unique_ptr<StageQueue> make_stage_queue() override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;

 private:
  ThreadPool pool_;
  HostMemory staging_memory_;
};

// Argument checks shared by the CPU ops: one line naming the op, the operand
// and expected vs found.
// (backend/op_checks.hpp; dtype checks also require host memory).
void expect_dtype(const Tensor& t, DType d, const char* op, const char* operand);
using checks::expect_cols;
using checks::expect_rows;
using checks::expect_unit_col_stride;

}  // namespace h3s::cpu
