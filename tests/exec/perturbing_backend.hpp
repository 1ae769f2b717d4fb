// A CPU backend that flips the lowest mantissa bit of one value of x after a
// gated residual on a row chunk shorter than the sequence, i.e. only on a
// streamed path (stock and whole-sequence chunks pass untouched): the
// deliberately diverging path self_check must catch.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.hpp"

namespace h3s::test {

class PerturbingBackend final : public Backend {
 public:
  // seq: the sequence length; a gated residual over fewer rows is a chunk.
  explicit PerturbingBackend(int64_t seq, int threads = 2)
      : inner_(make_cpu_backend(threads)), seq_(seq) {}
  int64_t perturbed() const { return perturbed_; }

  std::string_view name() const override { return "cpu+perturb"; }
  Device device() const override { return inner_->device(); }
  bool arena_scratch() const override { return inner_->arena_scratch(); }
  void rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                    std::span<const ModRun> runs, const Tensor& out) override {
    inner_->rms_norm_mod(x, gamma, eps, mod, runs, out);
  }
  void linear(const Tensor& x, const QuantLinear& w, const Tensor& y, RowRange features) override {
    inner_->linear(x, w, y, features);
  }
  void swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) override {
    inner_->swiglu_linear(f, w, y);
  }
  void qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                    int64_t rot_dim) override {
    inner_->qk_norm_rope(t, w, rope, eps, rot_dim);
  }
  void attn_state_reset(AttnState& s) override { inner_->attn_state_reset(s); }
  void attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) override {
    inner_->attention(q, kv, keys, s);
  }
  void attn_state_finish(const AttnState& s, const Tensor& out) override {
    inner_->attn_state_finish(s, out);
  }
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                      std::span<const ModRun> runs) override {
    inner_->gated_residual(x, y, gate, runs);
    if (x.rows() < seq_) {  // a streamed chunk: one value, one bit
      static_cast<uint16_t*>(x.data)[0] ^= 1u;
      ++perturbed_;
    }
  }
  void add_residual(const Tensor& x, const Tensor& y) override { inner_->add_residual(x, y); }
  void silu(const Tensor& x, const Tensor& y) override { inner_->silu(x, y); }
  void convert(const Tensor& x, const Tensor& y) override { inner_->convert(x, y); }
  void copy(const Tensor& x, const Tensor& y) override { inner_->copy(x, y); }
  void scale(const Tensor& x, float alpha) override { inner_->scale(x, alpha); }
  std::unique_ptr<WeightStore> make_weight_store(std::string name, size_t capacity) override {
    return inner_->make_weight_store(std::move(name), capacity);
  }
  QuantLinear prepare(const QuantLinear& src, Residency r, WeightStore& store) override {
    return inner_->prepare(src, r, store);
  }
  WeightArray<uint16_t> prepare(const WeightArray<uint16_t>& src, Residency r,
                                WeightStore& store) override {
    return inner_->prepare(src, r, store);
  }
  size_t prepared_bytes(const QuantLinear& src, Residency r) const override {
    return inner_->prepared_bytes(src, r);
  }
  size_t prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const override {
    return inner_->prepared_bytes(src, r);
  }
  MemoryResource& host_staging_memory() override { return inner_->host_staging_memory(); }
  size_t free_device_memory() const override { return inner_->free_device_memory(); }
  std::unique_ptr<StageQueue> make_stage_queue() override { return inner_->make_stage_queue(); }
  void upload(const void* host, const Tensor& dst) override { inner_->upload(host, dst); }
  void download(const Tensor& src, void* host) override { inner_->download(src, host); }

 private:
  std::unique_ptr<Backend> inner_;
  int64_t seq_;
  int64_t perturbed_ = 0;
};

}  // namespace h3s::test
