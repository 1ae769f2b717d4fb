// KvStore: where phase 1 of a streamed block leaves K and V for the whole
// sequence, and how phase 2 attends against them. One implementation per
// storage tier; this issue ships the exact bf16 tier.
#pragma once

#include <string_view>

#include "backend/backend.hpp"

namespace h3s {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual std::string_view name() const = 0;
  virtual bool exact() const = 0;
  // Phase 1: keep K and V of sequence rows `rows` (k, v: [rows, heads * 128]
  // views, e.g. columns of a QKV chunk).
  virtual void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) = 0;
  // Phase 2: run the query chunk q against every stored key, continuing the
  // caller's (reset) online-softmax state.
  virtual void attend(Backend& backend, const Tensor& q, AttnState& state) = 0;
};

}  // namespace h3s
