// kvfp4s' decode path (backend/kv_tier_decode.hpp: blocks of keys decoded by
// kvfp4s_decode, then the exact attention() with the state carried), which
// the CUDA backend runs where its Hopper kernel does not. On the CPU it must
// equal the tier's own attention bit for bit (the definition decodes each
// tile, then runs the exact tile arithmetic), over decode blocks of one
// tile, of three and larger than the keys, key ranges from key 0 or a later
// tile, and K/V blocks that cut the decode blocks; so the loop, its views
// and its state carry run in CI on every change.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/kv_tier_decode.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "exec_fixture.hpp"
#include "kv/kv_fp4s.hpp"

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

TEST(KvFp4sDecodePath, EqualsTheTiersAttentionBitForBit) {
  HostMemory memory;
  Arena arena(memory, 0);
  auto be = make_cpu_backend(2);
  const int64_t rows = 37, seq = 1000, heads = 3, width = heads * kHd;
  KvFp4sStore store(arena, seq, heads, kHd, 0);
  OwnedTensor k = random_bf16(*be, arena, seq, width, 91, 0.5f);
  OwnedTensor v = random_bf16(*be, arena, seq, width, 92, 0.0f);
  store.write(*be, {0, 600}, k.view.rows_view(0, 600), v.view.rows_view(0, 600));
  store.write(*be, {600, seq}, k.view.rows_view(600, seq), v.view.rows_view(600, seq));
  OwnedTensor q = random_bf16(*be, arena, rows, width, 93, 0.0f);
  be->rotate_heads(q.view);
  const KvFp4sView kv = store.view();

  auto run = [&](RowRange keys, int64_t kv_block, int64_t decode_keys) {
    AttnState s = AttnState::allocate(arena, rows, heads, kHd);
    be->attn_state_reset(s);
    const int64_t step = kv_block == 0 ? keys.size() : kv_block;
    for (int64_t b = keys.begin; b < keys.end; b += step) {
      const RowRange part{b, std::min(keys.end, b + step)};
      if (decode_keys == 0)
        be->attention_kvfp4s(q.view, kv, part, s);
      else
        attention_kvfp4s_decoded(*be, arena, q.view, kv, part, s, decode_keys);
    }
    return state_bits(s);
  };
  for (const RowRange keys : {RowRange{0, seq}, RowRange{256, seq}, RowRange{128, 129}}) {
    const std::vector<uint32_t> want = run(keys, 0, 0);
    for (const auto& [kv_block, decode_keys] :
         {std::pair<int64_t, int64_t>{0, 128}, {0, 384}, {0, 4096}, {640, 384}, {256, 128}})
      EXPECT_EQ(run(keys, kv_block, decode_keys), want)
          << "keys [" << keys.begin << ", " << keys.end << "), kv_block " << kv_block
          << ", decode blocks of " << decode_keys;
  }
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

}  // namespace
}  // namespace h3s::test
