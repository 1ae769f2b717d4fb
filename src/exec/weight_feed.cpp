// Weight residency plans and the forward's weight feed (weight_feed.hpp).
#include "exec/weight_feed.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace h3s {

namespace {

// Every linear and norm of a block, visited in one fixed order.
template <class B, class F>
void for_each_array(B& b, F&& f) {
  f(b.norm1);
  f(b.norm2);
  f(b.attn.qkv);
  f(b.attn.out);
  f(b.attn.q_norm);
  f(b.attn.k_norm);
  f(b.mlp.fc1);
  f(b.mlp.fc2);
  if constexpr (requires { b.adaln; }) f(b.adaln);
}

// The non-block weights, in one fixed order.
template <class M, class F>
void for_each_extra(M& m, F&& f) {
  f(m.video_patch);
  f(m.audio_patch);
  f(m.condition_proj);
  f(m.time_in);
  f(m.time_out);
  f(m.refiner_final_norm);
  f(m.final_layer.norm);
  f(m.final_layer.adaln);
  f(m.final_layer.video_out);
  f(m.final_layer.audio_out);
}

bool present(const QuantLinear& q) {
  return q.out > 0;
}
bool present(const WeightArray<uint16_t>& v) {
  return !v.empty();
}

template <class B>
B prepare_arrays(Backend& be, const B& src, Residency r, WeightStore& store) {
  B out = src;
  for_each_array(out, [&](auto& a) {
    if (present(a)) a = be.prepare(a, r, store);
  });
  return out;
}

template <class B>
size_t arrays_bytes(const Backend& be, const B& src, Residency r) {
  size_t n = 0;
  for_each_array(src, [&](const auto& a) {
    if (present(a)) n += be.prepared_bytes(a, r);
  });
  return n;
}

size_t extras_bytes(const Backend& be, const ModelWeights& w, Residency r) {
  size_t n = 0;
  for_each_extra(w, [&](const auto& a) {
    if (present(a)) n += be.prepared_bytes(a, r);
  });
  return n;
}

}  // namespace

BlockWeights prepare_block(Backend& be, const BlockWeights& src, Residency r, WeightStore& store) {
  return prepare_arrays(be, src, r, store);
}

RefinerBlockWeights prepare_refiner_block(Backend& be, const RefinerBlockWeights& src, Residency r,
                                          WeightStore& store) {
  return prepare_arrays(be, src, r, store);
}

size_t prepared_block_bytes(const Backend& be, const BlockWeights& src, Residency r) {
  return arrays_bytes(be, src, r);
}

size_t prepared_refiner_bytes(const Backend& be, const RefinerBlockWeights& src, Residency r) {
  return arrays_bytes(be, src, r);
}

std::string WeightPlan::describe() const {
  if (residency == Residency::resident)
    return fmt::format("weights resident: {}", format_bytes(model_bytes));
  return fmt::format("weights streamed block by block ({}): {} slot{} of {} + {} resident",
                     prefetch > 0 ? "prefetch 1: block i+1 loads while block i runs"
                                  : "no prefetch: only one block fits",
                     prefetch + 1, prefetch > 0 ? "s" : "", format_bytes(block_bytes),
                     format_bytes(extras_bytes));
}

WeightPlan plan_weights(const Backend& be, const ModelWeights& w, size_t budget) {
  // Copy sizes, whatever the backend would view in place: the same decisions
  // on the CPU as on a device.
  constexpr Residency kCopy = Residency::streamed;
  WeightPlan p;
  p.budget = budget;
  p.extras_bytes = extras_bytes(be, w, kCopy);
  p.model_bytes = p.extras_bytes;
  for (const RefinerBlockWeights& r : w.refiner) {
    const size_t b = prepared_refiner_bytes(be, r, kCopy);
    p.block_bytes = std::max(p.block_bytes, b);
    p.model_bytes += b;
  }
  for (const BlockWeights& k : w.blocks) {
    const size_t b = prepared_block_bytes(be, k, kCopy);
    p.block_bytes = std::max(p.block_bytes, b);
    p.model_bytes += b;
  }
  if (budget == 0 || p.model_bytes <= budget) {
    p.residency = Residency::resident;
    p.held_bytes = p.model_bytes;
    return p;
  }
  p.residency = Residency::streamed;
  if (p.extras_bytes + 2 * p.block_bytes <= budget) {
    p.prefetch = 1;
  } else if (p.extras_bytes + p.block_bytes > budget) {
    fail(ErrorKind::out_of_memory,
         "device budget for weights {} cannot hold the model's non-block weights ({}) and one "
         "block ({}): it needs at least {}; raise --vram-budget",
         format_bytes(budget), format_bytes(p.extras_bytes), format_bytes(p.block_bytes),
         format_bytes(p.extras_bytes + p.block_bytes));
  }
  p.held_bytes = p.extras_bytes + size_t(p.prefetch + 1) * p.block_bytes;
  return p;
}

// ---- the feed ------------------------------------------------------------------

WeightFeed::WeightFeed(Backend& be, const ModelWeights& src, const WeightPlan& plan)
    : be_(be), src_(src), plan_(plan) {
  extras_.config = src.config;
  extras_.format = src.format;
  extras_.adaln_t_table = src.adaln_t_table;
  extras_.rope_inv_freq = src.rope_inv_freq;
  extras_store_ = be.make_weight_store("weights (resident)", 0);
  {
    // Copy the views of the non-block weights, then prepare them in place.
    ModelWeights& e = extras_;
    e.video_patch = src.video_patch;
    e.audio_patch = src.audio_patch;
    e.condition_proj = src.condition_proj;
    e.time_in = src.time_in;
    e.time_out = src.time_out;
    e.refiner_final_norm = src.refiner_final_norm;
    e.final_layer = src.final_layer;
    for_each_extra(e, [&](auto& a) {
      if (present(a)) a = be.prepare(a, Residency::resident, *extras_store_);
    });
  }
  if (plan_.residency != Residency::streamed) {
    for (const RefinerBlockWeights& r : src.refiner)
      resident_refiner_.push_back(
          prepare_refiner_block(be, r, Residency::resident, *extras_store_));
    for (const BlockWeights& b : src.blocks)
      resident_blocks_.push_back(prepare_block(be, b, Residency::resident, *extras_store_));
  }
  extras_store_->seal();
  be.wait_ready(*extras_store_);
  if (plan_.residency == Residency::streamed) {
    slots_.resize(size_t(plan_.prefetch + 1));
    for (size_t i = 0; i < slots_.size(); ++i)
      slots_[i].store = be.make_weight_store(fmt::format("weights slot {}", i), plan_.block_bytes);
  }
}

WeightFeed::~WeightFeed() {
  if (pending_.valid()) pending_.wait();  // a prefetch still running reads src_ and a slot
}

int64_t WeightFeed::units() const {
  return int64_t(src_.refiner.size() + src_.blocks.size());
}

void WeightFeed::prepare_unit(Slot& s, int64_t unit) {
  s.store->reset();
  const int64_t nr = int64_t(src_.refiner.size());
  if (unit < nr)
    s.refiner =
        prepare_refiner_block(be_, src_.refiner[size_t(unit)], Residency::streamed, *s.store);
  else
    s.block = prepare_block(be_, src_.blocks[size_t(unit - nr)], Residency::streamed, *s.store);
  s.unit = unit;
  s.store->seal();
}

WeightFeed::Slot& WeightFeed::acquire(int64_t unit) {
  Slot& s = slots_[size_t(unit) % slots_.size()];
  if (pending_.valid()) {
    const int64_t was = pending_unit_;
    pending_.get();  // rethrows a failed prefetch
    pending_unit_ = -1;
    if (was != unit) prepare_unit(s, unit);  // out of order: prepare it now
  } else {
    prepare_unit(s, unit);
  }
  be_.wait_ready(*s.store);
  // Prefetch the next unit into the next slot, whose last unit was released.
  if (plan_.prefetch > 0 && unit + 1 < units()) {
    Slot& next = slots_[size_t(unit + 1) % slots_.size()];
    pending_unit_ = unit + 1;
    pending_ =
        std::async(std::launch::async, [this, &next, unit] { prepare_unit(next, unit + 1); });
  }
  return s;
}

void WeightFeed::release(int64_t unit) {
  be_.release(*slots_[size_t(unit) % slots_.size()].store);
}

const RefinerBlockWeights& WeightFeed::refiner(size_t i) {
  if (plan_.residency != Residency::streamed) return resident_refiner_.at(i);
  return acquire(int64_t(i)).refiner;
}

void WeightFeed::done_refiner(size_t i) {
  if (plan_.residency == Residency::streamed) release(int64_t(i));
}

const BlockWeights& WeightFeed::block(size_t i) {
  if (plan_.residency != Residency::streamed) return resident_blocks_.at(i);
  return acquire(int64_t(src_.refiner.size() + i)).block;
}

void WeightFeed::done_block(size_t i) {
  if (plan_.residency == Residency::streamed) release(int64_t(src_.refiner.size() + i));
}

size_t WeightFeed::peak_bytes() const {
  size_t n = extras_store_->peak();
  for (const Slot& s : slots_) n += s.store->peak();
  return n;
}

}  // namespace h3s
