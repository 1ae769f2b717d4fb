// The decode paths of kvfp4s and kvi8r (backend/kv_tier_decode.hpp: blocks
// of keys decoded by kvfp4s_decode / kvi8r_decode, then the exact
// attention() with the state carried), which the CUDA backend runs where
// its Hopper kernels do not. On the CPU each must equal the tier's own
// attention bit for bit (the definitions decode each tile, then run the
// exact tile arithmetic), over decode blocks of one tile, of three and
// larger than the keys, key ranges from key 0 or a later tile, and K/V
// blocks that cut the decode blocks; so the loop, its views, its state
// carry and attention()'s fp16 K/V form run in CI on every change.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/kv_tier_decode.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "exec/block_steps.hpp"
#include "exec_fixture.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8r.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kHd = 128;

OwnedTensor random_bf16(Backend& be, Arena& arena, int64_t rows, int64_t cols, uint64_t seed,
                        float offset) {
  Rng r(seed);
  std::vector<uint16_t> v(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i)
    v[size_t(i)] = f32_to_bf16(r.normal() + offset * float(i % 5)).bits;
  OwnedTensor t = arena.tensor(DType::bf16, {rows, cols}, "rows");
  be.upload(v.data(), t.view);
  return t;
}

std::vector<uint32_t> state_bits(const AttnState& s) {
  std::vector<uint32_t> out;
  for (const Tensor* t : {&s.m.view, &s.l.view, &s.acc.view}) {
    const size_t n = size_t(t->numel());
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, t->ptr<float>(), n * 4);
  }
  return out;
}

// The attention state after `keys` by the tier's own attention (decode_keys
// 0) or by its decode path, in K/V blocks of kv_block keys (0: one call).
template <class Attend, class Decoded>
std::vector<uint32_t> run_blocks(Backend& be, Arena& arena, int64_t rows, int64_t heads,
                                 RowRange keys, int64_t kv_block, int64_t decode_keys,
                                 Attend attend, Decoded decoded) {
  AttnState s = AttnState::allocate(arena, rows, heads, kHd);
  be.attn_state_reset(s);
  const int64_t step = kv_block == 0 ? keys.size() : kv_block;
  for (int64_t b = keys.begin; b < keys.end; b += step) {
    const RowRange part{b, std::min(keys.end, b + step)};
    if (decode_keys == 0)
      attend(part, s);
    else
      decoded(part, s, decode_keys);
  }
  return state_bits(s);
}

// Every (kv_block, decode block) pair below against the tier's own attention.
template <class Attend, class Decoded>
void expect_decode_path_bits(Backend& be, Arena& arena, int64_t rows, int64_t heads, int64_t seq,
                             Attend attend, Decoded decoded) {
  for (const RowRange keys : {RowRange{0, seq}, RowRange{256, seq}, RowRange{128, 129}}) {
    const std::vector<uint32_t> want =
        run_blocks(be, arena, rows, heads, keys, 0, 0, attend, decoded);
    for (const auto& [kv_block, decode_keys] :
         {std::pair<int64_t, int64_t>{0, 128}, {0, 384}, {0, 4096}, {640, 384}, {256, 128}})
      EXPECT_EQ(run_blocks(be, arena, rows, heads, keys, kv_block, decode_keys, attend, decoded),
                want)
          << "keys [" << keys.begin << ", " << keys.end << "), kv_block " << kv_block
          << ", decode blocks of " << decode_keys;
  }
}

// K and V of `seq` rows written into `store` in two writes (a cut inside
// kvfp4s' 256-token stat block), and `rows` queries rotated into the
// tiers' basis: the problem both tiers' bit-equality tests attend.
OwnedTensor write_store_and_rotated_q(Backend& be, Arena& arena, KvStore& store, int64_t rows,
                                      int64_t seq, int64_t width, uint64_t seed) {
  constexpr int64_t kCut = 600;
  OwnedTensor k = random_bf16(be, arena, seq, width, seed, 0.5f);
  OwnedTensor v = random_bf16(be, arena, seq, width, seed + 1, 0.0f);
  store.write(be, {0, kCut}, k.view.rows_view(0, kCut), v.view.rows_view(0, kCut));
  store.write(be, {kCut, seq}, k.view.rows_view(kCut, seq), v.view.rows_view(kCut, seq));
  OwnedTensor q = random_bf16(be, arena, rows, width, seed + 2, 0.0f);
  be.rotate_heads(q.view);
  return q;
}

TEST(KvFp4sDecodePath, EqualsTheTiersAttentionBitForBit) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(2);
  const int64_t rows = 37, seq = 1000, heads = 3, width = heads * kHd;
  KvFp4sStore store(arena, seq, heads, kHd, 0);
  const OwnedTensor q = write_store_and_rotated_q(*be, arena, store, rows, seq, width, 91);
  const KvFp4sView kv = store.view();
  expect_decode_path_bits(
      *be, arena, rows, heads, seq,
      [&](RowRange part, AttnState& s) { be->attention_kvfp4s(q.view, kv, part, s); },
      [&](RowRange part, AttnState& s, int64_t decode_keys) {
        attention_kvfp4s_decoded(*be, arena, q.view, kv, part, s, decode_keys);
      });
}

TEST(KvFp4sDecodePath, RefusesDecodeBlocksOffTheTileNamingTheFix) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(1);
  KvFp4sStore store(arena, 300, 1, kHd, 0);
  OwnedTensor k = random_bf16(*be, arena, 300, kHd, 94, 0.0f);
  store.write(*be, {0, 300}, k.view, k.view);
  OwnedTensor q = random_bf16(*be, arena, 2, kHd, 95, 0.0f);
  AttnState s = AttnState::allocate(arena, 2, 1, kHd);
  be->attn_state_reset(s);
  for (const int64_t bad : {int64_t(0), int64_t(100), int64_t(-128)}) {
    try {
      attention_kvfp4s_decoded(*be, arena, q.view, store.view(), {0, 300}, s, bad);
      FAIL() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("multiple of the 128-key"), std::string::npos)
          << e.what();
    }
  }
}

TEST(KvI8rDecodePath, EqualsTheTiersAttentionBitForBit) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(2);
  const int64_t rows = 41, seq = 1000, heads = 3, width = heads * kHd;
  KvI8rStore store(arena, seq, heads, kHd, 0);
  const OwnedTensor q = write_store_and_rotated_q(*be, arena, store, rows, seq, width, 101);
  const KvI8View kv = store.view();
  expect_decode_path_bits(
      *be, arena, rows, heads, seq,
      [&](RowRange part, AttnState& s) { be->attention_kvi8r(q.view, kv, part, s); },
      [&](RowRange part, AttnState& s, int64_t decode_keys) {
        attention_kvi8r_decoded(*be, arena, q.view, kv, part, s, decode_keys);
      });
}

// kvi8r_decode writes the definition's fp16(code x scale) for every key and
// head of the range asked, into a view wider than the heads (a row stride
// past them), and nothing outside it.
TEST(KvI8rDecodePath, DecodeWritesTheDefinitionsFp16) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(2);
  const int64_t seq = 300, heads = 2, width = heads * kHd;
  KvI8rStore store(arena, seq, heads, kHd, 0);
  OwnedTensor k = random_bf16(*be, arena, seq, width, 104, 0.25f);
  OwnedTensor v = random_bf16(*be, arena, seq, width, 105, 0.0f);
  store.write(*be, {0, seq}, k.view, v.view);
  const KvI8View kv = store.view();
  const RowRange keys{37, 250};
  constexpr uint16_t kCanary = 0x7e00;  // an fp16 NaN no decode writes
  OwnedTensor out = arena.tensor(DType::f16, {keys.size(), 2 * (heads + 1) * kHd}, "decoded");
  std::fill_n(out.view.ptr<uint16_t>(), out.view.numel(), kCanary);
  auto heads_view = [&](int64_t first_col) {
    return steps::as_heads(out.view.cols_view(first_col, first_col + width), heads, kHd);
  };
  const Tensor kd = heads_view(0), vd = heads_view((heads + 1) * kHd);
  be->kvi8r_decode(kv, keys, kd, vd);
  int64_t wrong = 0;
  for (int64_t r = 0; r < keys.size(); ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < kHd; ++d)
        for (const bool is_k : {true, false}) {
          const Tensor& code = is_k ? kv.k_code : kv.v_code;
          const Tensor& scale = is_k ? kv.k_scale : kv.v_scale;
          const int64_t key = keys.begin + r;
          const uint16_t want = kvi8r::dequantise_f16(
              code.row<uint8_t>(key)[h * kHd + d],
              scale.ptr<uint16_t>()[key * scale.stride[0] + h * scale.stride[1]]);
          const uint16_t got =
              out.view.row<uint16_t>(r)[(is_k ? 0 : (heads + 1) * kHd) + h * kHd + d];
          wrong += got != want;
        }
  EXPECT_EQ(wrong, 0);
  int64_t untouched = 0;  // the head-sized gaps after K's and V's heads
  for (int64_t r = 0; r < keys.size(); ++r)
    for (int64_t d = 0; d < kHd; ++d)
      untouched += (out.view.row<uint16_t>(r)[width + d] == kCanary) +
                   (out.view.row<uint16_t>(r)[(heads + 1) * kHd + width + d] == kCanary);
  EXPECT_EQ(untouched, 2 * keys.size() * kHd);
}

// The fp16 K/V form of attention() and kvi8r_decode refuse what they do
// not take, naming the operand.
TEST(KvI8rDecodePath, RefusesMixedOrWrongDtypesNamingTheOperand) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(1);
  const int64_t seq = 256;
  OwnedTensor q = random_bf16(*be, arena, 2, kHd, 106, 0.0f);
  OwnedTensor kh = arena.tensor(DType::f16, {seq, 1, kHd}, "k");
  OwnedTensor vb = arena.tensor(DType::bf16, {seq, 1, kHd}, "v");
  OwnedTensor kf = arena.tensor(DType::f32, {seq, 1, kHd}, "k");
  AttnState s = AttnState::allocate(arena, 2, 1, kHd);
  be->attn_state_reset(s);
  auto expect_refused = [](auto call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "accepted; wanted an error with \"" << needle << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(
      [&] {
        be->attention(q.view, {kh.view, vb.view}, {0, seq}, s);
      },
      "v must be f16, got bf16");
  expect_refused(
      [&] {
        be->attention(q.view, {kf.view, kf.view}, {0, seq}, s);
      },
      "k must be bf16 (or f16");
  KvI8rStore store(arena, seq, 1, kHd, 0);
  OwnedTensor k = random_bf16(*be, arena, seq, kHd, 107, 0.0f);
  store.write(*be, {0, seq}, k.view, k.view);
  expect_refused(
      [&] {
        be->kvi8r_decode(store.view(), {0, seq}, vb.view, vb.view);
      },
      "k must be f16, got bf16");
  expect_refused(
      [&] {
        be->kvi8r_decode(store.view(), {0, seq + 1}, kh.view, kh.view);
      },
      "outside the store's 256 rows");
}

}  // namespace
}  // namespace h3s::test
