// AttnState allocation (backend-independent: the arena decides where it lives).
#include "backend/backend.hpp"

namespace h3s {

AttnState AttnState::allocate(Arena& arena, int64_t rows, int64_t heads, int64_t head_dim) {
  AttnState s;
  s.rows = rows;
  s.heads = heads;
  s.head_dim = head_dim;
  s.m = arena.tensor(DType::f32, {rows, heads}, "attention running max");
  s.l = arena.tensor(DType::f32, {rows, heads}, "attention running sum");
  s.acc = arena.tensor(DType::f32, {rows, heads, head_dim}, "attention accumulator");
  return s;
}

}  // namespace h3s
