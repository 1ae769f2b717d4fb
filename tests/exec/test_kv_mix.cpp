// kvmix on the CPU backend (kvfmt/kvmix.hpp, kv/kv_mix.hpp): each head's
// attention is its sub-store's bit for bit, chunked writes and any head set
// included; the calibration puts the fp4-sensitive heads on 8 bits and its
// sample depends on the sequence length alone; the per-block head sets are
// kept from a block's first call; the options and the head lists refuse bad
// values by name. (Streamed == stock inside the tier, with exact_av_rows
// too: tests/exec/test_kv_tiers.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/dtype.hpp"
#include "exec/kvmix_heads.hpp"
#include "exec/placement.hpp"
#include "exec_fixture.hpp"
#include "kv/kv_bf16.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8s.hpp"
#include "kv/kv_mix.hpp"
#include "kvfmt/kvmix.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kDim = 128;

// q, k, v [seq, heads * 128] with per-head scales of q and k (a head whose
// q or k is larger turns the same relative fp4 error into a larger logit
// error).
struct Qkv {
  HostMemory mem;
  Arena arena{mem, 0};
  std::unique_ptr<Backend> be = make_cpu_backend(3);
  int64_t seq, heads;
  OwnedTensor q, k, v;
  Qkv(int64_t s, int64_t h, const std::vector<float>& q_scale, uint64_t seed) : seq(s), heads(h) {
    Rng r(seed);
    const auto fill = [&](const char* what, bool scaled) {
      OwnedTensor t = arena.tensor(DType::bf16, {seq, heads * kDim}, what);
      for (int64_t i = 0; i < seq * heads * kDim; ++i) {
        const float scale = scaled ? q_scale[size_t((i / kDim) % heads)] : 1.0f;
        t.view.ptr<uint16_t>()[i] = f32_to_bf16(r.normal() * scale).bits;
      }
      return t;
    };
    q = fill("q", true);
    k = fill("k", true);
    v = fill("v", false);
  }
  // The attention of every query through `store`, written in chunks of the
  // given sizes (cycled), bf16 bits [seq, heads * 128].
  std::vector<uint16_t> attend(KvStore& store, const std::vector<int64_t>& chunks) {
    for (int64_t at = 0, i = 0; at < seq; ++i) {
      const int64_t end = std::min(seq, at + chunks[size_t(i) % chunks.size()]);
      store.write(*be, {at, end}, k.view.rows_view(at, end), v.view.rows_view(at, end));
      at = end;
    }
    OwnedTensor qc = arena.tensor(DType::bf16, {seq, heads * kDim}, "q copy");
    be->copy(q.view, qc.view);  // a store may rotate its queries in place
    AttnState s = AttnState::allocate(arena, seq, heads, kDim);
    be->attn_state_reset(s);
    const QueryChunk c{qc.view, &s};
    store.attend(*be, {&c, 1});
    OwnedTensor out = arena.tensor(DType::bf16, {seq, heads * kDim}, "out");
    store.finish(*be, s, out.view);
    const uint16_t* o = out.view.ptr<uint16_t>();
    return {o, o + seq * heads * kDim};
  }
  std::vector<uint16_t> exact() {
    KvBf16Store store(arena, seq, heads, kDim, 0);
    return attend(store, {seq});
  }
};

double rel_rms(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& got) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = bf16_to_f32(bf16{ref[i]}), b = bf16_to_f32(bf16{got[i]});
    num += (a - b) * (a - b);
    den += a * a;
  }
  return std::sqrt(num / den);
}

bool head_equal(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t heads,
                int64_t h) {
  for (size_t row = 0; row < a.size() / size_t(heads * kDim); ++row) {
    const size_t at = row * size_t(heads * kDim) + size_t(h * kDim);
    if (!std::equal(a.begin() + long(at), a.begin() + long(at + kDim), b.begin() + long(at)))
      return false;
  }
  return true;
}

// Each head of a kvmix store is its sub-store's head, bit for bit: the
// 8-bit heads kvi8s', the others kvfp4s' (both quantise and attend each head
// on its own), whatever the head set (none, all, runs, singletons) and the
// write chunks (1 row, primes, cutting kvi8s' 64- and kvfp4s' 256-token
// blocks), over a prime number of tokens and an odd number of heads.
TEST(KvMix, EachHeadIsItsSubStoresHeadBitForBit) {
  const int64_t seq = 389, heads = 5;
  Qkv in(seq, heads, std::vector<float>(heads, 1.0f), 3);
  KvI8sStore i8s(in.arena, seq, heads, kDim, 0);
  KvFp4sStore fp4s(in.arena, seq, heads, kDim, 0);
  const std::vector<uint16_t> on8 = in.attend(i8s, {seq}), on4 = in.attend(fp4s, {seq});
  const std::vector<std::vector<int>> sets = {{}, {0, 1, 2, 3, 4}, {1, 2, 3}, {0, 4}, {3}};
  const std::vector<std::vector<int64_t>> chunks = {{seq}, {1, 97, 13}, {300}, {64, 191}};
  for (size_t i = 0; i < sets.size(); ++i) {
    KvMixStore mix(in.arena, seq, heads, kDim, kAttnKvTile * int64_t(i % 2), sets[i]);
    const std::vector<uint16_t> got = in.attend(mix, chunks[i % chunks.size()]);
    for (int64_t h = 0; h < heads; ++h) {
      const bool eight = std::find(sets[i].begin(), sets[i].end(), int(h)) != sets[i].end();
      EXPECT_TRUE(head_equal(got, eight ? on8 : on4, heads, h))
          << "set " << kvmix::format_heads(sets[i]) << " head " << h;
    }
  }
  // Bytes: the two sub-stores'.
  EXPECT_EQ(KvMixStore::bytes(seq, heads, kDim, 2),
            KvI8sStore::bytes(seq, 2, kDim) + KvFp4sStore::bytes(seq, 3, kDim));
  EXPECT_EQ(KvMixStore::bytes(seq, heads, kDim, 0), KvFp4sStore::bytes(seq, heads, kDim));
}

// The calibration ranks heads by their fp4 sensitivity: with q and k of
// heads 1 and 4 scaled up (x3 and x2), those two go on 8 bits, and kvmix
// with them errs less than with the complementary pair; the error lies
// between kvi8s' and kvfp4s' on every head.
TEST(KvMix, CalibrationPutsTheFp4SensitiveHeadsOn8Bits) {
  const int64_t seq = 700, heads = 5;
  Qkv in(seq, heads, {1.0f, 3.0f, 1.0f, 1.0f, 2.0f}, 5);
  const int64_t inner = heads * kDim;
  const std::vector<RowRange> windows = kvmix::sample_windows(seq);
  std::vector<int64_t> rows;
  for (const RowRange& r : windows) rows.push_back(r.size());
  ASSERT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t(0)), seq);  // 3 blocks: all rows
  const std::vector<double> score =
      kvmix::fp4_sensitivity(in.q.view.ptr<uint16_t>(), in.k.view.ptr<uint16_t>(),
                             in.v.view.ptr<uint16_t>(), inner, rows, heads);
  ThreadPool pool(3);
  EXPECT_EQ(kvmix::fp4_sensitivity(in.q.view.ptr<uint16_t>(), in.k.view.ptr<uint16_t>(),
                                   in.v.view.ptr<uint16_t>(), inner, rows, heads, &pool),
            score)
      << "the scores depend on the thread count";
  const std::vector<int> picked = kvmix::pick_8bit_heads(score, 2);
  EXPECT_EQ(picked, (std::vector<int>{1, 4})) << kvmix::format_heads(picked);
  const std::vector<uint16_t> exact = in.exact();
  const auto error_with = [&](const std::vector<int>& set) {
    KvMixStore mix(in.arena, seq, heads, kDim, 0, set);
    return rel_rms(exact, in.attend(mix, {seq}));
  };
  KvI8sStore i8s(in.arena, seq, heads, kDim, 0);
  KvFp4sStore fp4s(in.arena, seq, heads, kDim, 0);
  const double e8 = rel_rms(exact, in.attend(i8s, {seq})),
               e4 = rel_rms(exact, in.attend(fp4s, {seq}));
  const double picked_error = error_with(picked), other_error = error_with({0, 2});
  std::printf(
      "[ kvmix ] rel-rms: kvi8s %.4g, kvmix calibrated %.4g, kvmix {0,2} %.4g, kvfp4s %.4g\n", e8,
      picked_error, other_error, e4);
  EXPECT_LT(picked_error, other_error);
  EXPECT_LT(e8, picked_error);
  EXPECT_LT(picked_error, e4);
}

// The sample: up to 8 stat blocks at absolute positions, spread over the
// sequence, from its length alone.
TEST(KvMix, SampleWindowsAreStatBlocksSpreadOverTheSequence) {
  EXPECT_TRUE(kvmix::sample_windows(0).empty());
  EXPECT_EQ(kvmix::sample_windows(1), (std::vector<RowRange>{{0, 1}}));
  EXPECT_EQ(kvmix::sample_windows(300), (std::vector<RowRange>{{0, 256}, {256, 300}}));
  for (const int64_t seq : {int64_t(2048), int64_t(217088), int64_t(300001)}) {
    const std::vector<RowRange> w = kvmix::sample_windows(seq);
    ASSERT_EQ(w.size(), size_t(kvmix::kSampleBlocks)) << seq;
    EXPECT_EQ(w.front().begin, 0);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i].begin % 256, 0);
      EXPECT_EQ(w[i].size(), std::min<int64_t>(256, seq - w[i].begin));
      if (i > 0) {
        EXPECT_GE(w[i].begin, w[i - 1].end);
      }
    }
    EXPECT_GT(w.back().begin, seq * 3 / 4) << "the sample reaches the end of the sequence";
  }
}

TEST(KvMix, HeadListsAreParsedAndCheckedByName) {
  EXPECT_EQ(kvmix::parse_heads(" 5, 0 ,9"), (std::vector<int>{0, 5, 9}));
  EXPECT_TRUE(kvmix::parse_heads("").empty());
  EXPECT_TRUE(kvmix::parse_heads("  ").empty());
  for (const char* bad : {"1,,2", "1,", "x", "-1", "1.5", "3 4"}) {
    try {
      kvmix::parse_heads(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("kv_mix_heads"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(kvmix::format_heads(std::vector<int>{0, 5, 9}), "0,5,9");
  EXPECT_NO_THROW(kvmix::check_heads(std::vector<int>{0, 55}, 56));
  EXPECT_THROW(kvmix::check_heads(std::vector<int>{56}, 56), Error);
  EXPECT_THROW(kvmix::check_heads(std::vector<int>{3, 3}, 56), Error);
  HostMemory mem;
  Arena arena(mem, 0);
  EXPECT_THROW(KvMixStore(arena, 10, 4, kDim, 0, std::vector<int>{4}), Error);
  EXPECT_EQ(kvmix::pick_8bit_heads(std::vector<double>{1, 3, 3, 0}, 2), (std::vector<int>{1, 2}));
}

TEST(KvMix, OptionsRefuseBadHeadListsAndCounts) {
  ExecOptions o;
  o.kv_store = KvTier::kvmix;
  EXPECT_NO_THROW(o.validate());
  o.kv_mix_heads = {0, 7};
  EXPECT_NO_THROW(o.validate());
  o.kv_mix_count = 3;  // two heads given, three asked for
  EXPECT_THROW(o.validate(), Error);
  o.kv_mix_count = 0;
  o.kv_mix_heads = {1, -2};
  EXPECT_THROW(o.validate(), Error);
  o.kv_mix_heads = {4, 4};
  EXPECT_THROW(o.validate(), Error);
  o.kv_mix_heads = {};
  o.kv_mix_count = -1;
  EXPECT_THROW(o.validate(), Error);
  // The planner counts both sub-stores and a chunk's gathers.
  o.kv_mix_count = 28;
  EXPECT_EQ(kv_store_bytes(o, 217088, 56, kDim),
            KvMixStore::bytes(217088, 56, kDim, 28) + KvMixStore::chunk_bytes(16384, 56, kDim, 28));
  EXPECT_EQ(KvMixStore::chunk_bytes(100, 56, kDim, 10), KvMixStore::chunk_bytes(100, 56, kDim, 46));
  EXPECT_LT(double(KvMixStore::bytes(217088, 56, kDim, 28)) / (2.0 * 217088 * 56 * kDim), 0.81);
}

// Head sets per block: the options' set for every block (checked against
// the block's heads); otherwise calibrated on a block's first call and kept
// (the same set from the same input, a new one when the count changes).
TEST(KvMix, HeadSetsAreKeptFromEachBlocksFirstCall) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  BlockHarness h(w, small_layout(w.config, 5, 3, 29, true, false));
  std::vector<uint16_t> x = h.random_x(h.layout.seq_len);
  const Tensor t = h.tensor(x);
  ExecOptions o;
  KvMixHeads sets;
  EXPECT_TRUE(sets.for_block(*h.be, h.arena, h.view(), t, o).empty()) << "not kvmix";
  o.kv_store = KvTier::kvmix;
  o.kv_mix_heads = {1};
  EXPECT_EQ(sets.for_block(*h.be, h.arena, h.view(), t, o), std::vector<int>{1});
  EXPECT_TRUE(sets.kept().empty()) << "a given set is not a calibration";
  o.kv_mix_heads = {int(w.config.heads)};
  EXPECT_THROW(sets.for_block(*h.be, h.arena, h.view(), t, o), Error);
  o.kv_mix_heads = {};
  const std::vector<int> first = sets.for_block(*h.be, h.arena, h.view(), t, o);
  EXPECT_EQ(int64_t(first.size()), w.config.heads / 2);
  EXPECT_EQ(sets.kept().at(0), first);
  ResidualRows rows(t);
  EXPECT_EQ(first, calibrate_kvmix(*h.be, h.arena, h.view(), rows, w.config.heads / 2));
  // A later call with another input keeps the first call's set.
  std::vector<uint16_t> y = h.random_x(12345);
  EXPECT_EQ(sets.for_block(*h.be, h.arena, h.view(), h.tensor(y), o), first);
  o.kv_mix_count = 1;
  EXPECT_EQ(sets.for_block(*h.be, h.arena, h.view(), t, o).size(), 1u);
  o.kv_mix_count = w.config.heads + 1;
  EXPECT_THROW(sets.for_block(*h.be, h.arena, h.view(), t, o), Error);
}

}  // namespace
}  // namespace h3s::test
