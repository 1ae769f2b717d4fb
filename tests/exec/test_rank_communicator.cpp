// Sequence parallel's plumbing on simulated ranks (src/dist): the row, head
// and key-shard splits, the ring's schedule, and the in-process
// communicator's delivery and its errors. The rank-parallel block itself is
// tested in test_rank_parallel.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "dist/local_communicator.hpp"
#include "dist/rank_split.hpp"

namespace h3s::test {
namespace {

using std::chrono::milliseconds;

// ---- splits and the ring plan ----------------------------------------------

TEST(RankSplit, BalancedSplitsCoverEverythingLargerPartsFirst) {
  EXPECT_EQ(split_heads(56, 3), (std::vector<RowRange>{{0, 19}, {19, 38}, {38, 56}}));
  for (int64_t n = 0; n <= 40; ++n)
    for (int parts = 1; parts <= 5; ++parts) {
      const std::vector<RowRange> s = split_rows(n, parts);
      ASSERT_EQ(s.size(), size_t(parts));
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const RowRange r = s[size_t(i)];
        EXPECT_EQ(r.begin, next) << n << " over " << parts;
        next = r.end;
        EXPECT_TRUE(r.size() == n / parts || r.size() == n / parts + 1);
        if (i > 0) {
          EXPECT_LE(r.size(), s[size_t(i - 1)].size());
        }
        if (n >= parts) {
          EXPECT_GE(r.size(), 1) << n << " over " << parts;
        }
      }
      EXPECT_EQ(next, n);
    }
}

TEST(RankSplit, KeyShardsStartOnAttentionTiles) {
  EXPECT_EQ(split_key_tiles(600, 4),
            (std::vector<RowRange>{{0, 256}, {256, 384}, {384, 512}, {512, 600}}));
  EXPECT_EQ(split_key_tiles(40, 3), (std::vector<RowRange>{{0, 40}, {40, 40}, {40, 40}}));
  for (int64_t keys : {0, 1, 127, 128, 129, 383, 384, 1000, 2049})
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const std::vector<RowRange> s = split_key_tiles(keys, ranks);
      int64_t next = 0;
      for (const RowRange& r : s) {
        EXPECT_EQ(r.begin, next);
        if (r.size() > 0) {
          EXPECT_EQ(r.begin % kAttnKvTile, 0) << keys << " keys over " << ranks;
        }
        next = r.end;
      }
      EXPECT_EQ(next, keys);
    }
}

// Every chunk visits the non-empty shards in key order, one a step; every
// row of the sequence is in exactly one chunk, owned by its shard's rank.
TEST(RankSplit, RingPlanVisitsShardsInKeyOrder) {
  for (int64_t seq : {1, 5, 128, 131, 600, 1100})
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (int64_t q_chunk : {0, 1, 7, 100}) {
        if (q_chunk == 1 && seq > 200) continue;
        const RingPlan p = RingPlan::make(seq, ranks, q_chunk);
        const std::string where = fmt::format("seq {} ranks {} q_chunk {}", seq, ranks, q_chunk);
        int hops = 0;
        for (const RowRange& s : p.shards) hops += s.size() > 0 ? 1 : 0;
        EXPECT_EQ(p.hops, hops) << where;
        int64_t next = 0;
        for (const RingPlan::Chunk& c : p.chunks) {
          EXPECT_EQ(c.rows.begin, next) << where;
          next = c.rows.end;
          const RowRange own = p.shards[size_t(c.owner)];
          EXPECT_TRUE(c.rows.begin >= own.begin && c.rows.end <= own.end) << where;
          if (q_chunk > 0) {
            EXPECT_LE(c.rows.size(), q_chunk);
          }
        }
        EXPECT_EQ(next, seq) << where;
        std::vector<std::vector<int>> visits(p.chunks.size());
        std::vector<int64_t> first_step(p.chunks.size(), -1), last_step(p.chunks.size(), -1);
        for (int64_t t = 0; t < p.steps(); ++t)
          for (int r = 0; r < ranks; ++r)
            if (const int64_t c = p.chunk_at(r, t); c >= 0) {
              if (first_step[size_t(c)] < 0) first_step[size_t(c)] = t;
              last_step[size_t(c)] = t;
              visits[size_t(c)].push_back(r);
            }
        std::vector<int> order(size_t(p.hops));
        for (int r = 0; r < p.hops; ++r) order[size_t(r)] = r;
        for (size_t c = 0; c < p.chunks.size(); ++c) {
          EXPECT_EQ(visits[c], order) << where << " chunk " << c;
          EXPECT_EQ(last_step[c] - first_step[c], p.hops - 1) << where << " chunk " << c;
        }
        EXPECT_EQ(p.chunk_at(0, p.steps()), -1);
      }
}

// ---- the local communicator -------------------------------------------------

// A byte that says who sent it to whom, in which round, at which offset.
uint8_t pattern(int from, int to, int round, size_t i) {
  return uint8_t(from * 61 + to * 17 + round * 5 + int(i) * 3 + 1);
}
size_t count_from_to(int from, int to) {
  return size_t((from * 3 + to) % 4) * 5;  // some pairs send nothing
}

// Collects failures from rank threads (gtest assertions stay on the main thread).
struct Failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    const std::lock_guard<std::mutex> lock(mu);
    list.push_back(std::move(s));
  }
};

TEST(RankCommunicator, AllToAllDeliversVariableCountsToTheRightPeer) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    Failures f;
    run_local_ranks(ranks, [&](Communicator& comm) {
      const int me = comm.rank();
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(ranks)),
            in(static_cast<size_t>(ranks));
        std::vector<SendBytes> send;
        std::vector<RecvBytes> recv;
        for (int p = 0; p < ranks; ++p) {
          out[size_t(p)].resize(count_from_to(me, p));
          for (size_t i = 0; i < out[size_t(p)].size(); ++i)
            out[size_t(p)][i] = pattern(me, p, round, i);
          in[size_t(p)].assign(count_from_to(p, me), 0xEE);
          send.push_back({.data = out[size_t(p)].data(), .size = out[size_t(p)].size()});
          recv.push_back({.data = in[size_t(p)].data(), .size = in[size_t(p)].size()});
        }
        comm.all_to_all(send, recv);
        for (int p = 0; p < ranks; ++p)
          for (size_t i = 0; i < in[size_t(p)].size(); ++i)
            if (in[size_t(p)][i] != pattern(p, me, round, i))
              f.add(fmt::format("{} ranks round {}: rank {} byte {} from rank {}", ranks, round, me,
                                i, p));
      }
    });
    EXPECT_TRUE(f.list.empty()) << f.list.size() << " bad bytes, first: " << f.list.front();
  }
}

TEST(RankCommunicator, AllGatherConcatenatesInRankOrder) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    Failures f;
    run_local_ranks(ranks, [&](Communicator& comm) {
      std::vector<uint8_t> mine(6), all(6 * size_t(ranks), 0);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = pattern(comm.rank(), 0, 0, i);
      comm.barrier();
      comm.all_gather({.data = mine.data(), .size = mine.size()},
                      {.data = all.data(), .size = all.size()});
      for (int s = 0; s < ranks; ++s)
        for (size_t i = 0; i < 6; ++i)
          if (all[size_t(s) * 6 + i] != pattern(s, 0, 0, i))
            f.add(fmt::format("rank {} got rank {}'s byte {} wrong", comm.rank(), s, i));
    });
    EXPECT_TRUE(f.list.empty()) << f.list.front();
  }
}

// Transfers between one pair match in issue order, across groups too, and
// a rank may send to itself in a group.
TEST(RankCommunicator, ExchangeMatchesEachPairInIssueOrder) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    Failures f;
    run_local_ranks(ranks, [&](Communicator& comm) {
      const int me = comm.rank(), right = (me + 1) % ranks, left = (me + ranks - 1) % ranks;
      std::vector<uint8_t> a(3), b(9), self(4), got_a(3), got_b(9), got_self(4);
      for (size_t i = 0; i < 9; ++i) {
        if (i < a.size()) a[i] = pattern(me, right, 1, i);
        b[i] = pattern(me, right, 2, i);
        if (i < self.size()) self[i] = pattern(me, me, 3, i);
      }
      const PeerSend sends[] = {{.peer = right, .bytes = {.data = a.data(), .size = 3}},
                                {.peer = right, .bytes = {.data = b.data(), .size = 9}},
                                {.peer = me, .bytes = {.data = self.data(), .size = 4}}};
      const PeerRecv recvs[] = {{.peer = left, .bytes = {.data = got_a.data(), .size = 3}},
                                {.peer = left, .bytes = {.data = got_b.data(), .size = 9}},
                                {.peer = me, .bytes = {.data = got_self.data(), .size = 4}}};
      if (me % 2 == 0) {  // one group; odd ranks split theirs: pairs still match in order
        comm.exchange(sends, recvs);
      } else {
        comm.exchange(std::span(sends, 1), std::span(recvs, 1));
        comm.exchange(std::span(sends + 1, 1), std::span(recvs + 1, 1));
        // A send to itself needs its receive in the same group (as in NCCL).
        comm.exchange(std::span(sends + 2, 1), std::span(recvs + 2, 1));
      }
      for (size_t i = 0; i < 9; ++i) {
        if (i < 3 && got_a[i] != pattern(left, me, 1, i)) f.add("first message");
        if (got_b[i] != pattern(left, me, 2, i)) f.add("second message");
        if (i < 4 && got_self[i] != pattern(me, me, 3, i)) f.add("message to itself");
      }
    });
    EXPECT_TRUE(f.list.empty()) << ranks << " ranks: " << f.list.front();
  }
}

// The error run_local_ranks rethrows for `work` (empty: none).
std::string failure_of(int ranks, const std::function<void(Communicator&)>& work,
                       milliseconds timeout = milliseconds(60000)) {
  try {
    run_local_ranks(ranks, work, timeout);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RankCommunicator, MismatchedCallsFailNamingTheRankAndTheCall) {
  const std::string kinds = failure_of(2, [](Communicator& comm) {
    std::vector<uint8_t> buf(8);
    if (comm.rank() == 0) {
      comm.all_gather({.data = buf.data(), .size = 4}, {.data = buf.data(), .size = 8});
    } else {
      const std::vector<SendBytes> s(2);
      const std::vector<RecvBytes> r(2);
      comm.all_to_all(s, r);
    }
  });
  EXPECT_NE(kinds.find("rank 1 called all_to_all (its collective #0) while rank 0 called "
                       "all_gather"),
            std::string::npos)
      << kinds;

  const std::string counts = failure_of(3, [](Communicator& comm) {
    std::vector<uint8_t> buf(64);
    std::vector<SendBytes> s(3, SendBytes{.data = buf.data(), .size = 4});
    std::vector<RecvBytes> r(3, RecvBytes{.data = buf.data() + 32, .size = 4});
    if (comm.rank() == 2) r[1].size = 8;  // rank 2 expects 8 bytes from rank 1, which sends 4
    comm.barrier();
    comm.all_to_all(s, r);
  });
  EXPECT_NE(counts.find("all_to_all #1: rank 1 sends 4 bytes to rank 2, which expects 8"),
            std::string::npos)
      << counts;

  const std::string p2p = failure_of(2, [](Communicator& comm) {
    std::vector<uint8_t> buf(8);
    if (comm.rank() == 0)
      comm.send({.data = buf.data(), .size = 4}, 1);
    else
      comm.recv({.data = buf.data(), .size = 8}, 0);
  });
  EXPECT_NE(p2p.find("rank 1 receives 8 bytes from rank 0 in its exchange #0, but rank 0 sent 4"),
            std::string::npos)
      << p2p;

  const std::string gather = failure_of(2, [](Communicator& comm) {
    std::vector<uint8_t> buf(16);
    const size_t n = comm.rank() == 0 ? 4 : 6;
    comm.all_gather({.data = buf.data(), .size = n}, {.data = buf.data() + 4, .size = 2 * n});
  });
  EXPECT_NE(gather.find("all_gather #0: rank 1 sends 6 bytes, rank 0 sends 4"), std::string::npos)
      << gather;
}

TEST(RankCommunicator, ARankThatCannotBeWaitedForFailsInsteadOfHanging) {
  // Rank 1 finishes without the barrier rank 0 waits in.
  const std::string finished = failure_of(2, [](Communicator& comm) {
    if (comm.rank() == 0) comm.barrier();
  });
  EXPECT_NE(finished.find("rank 0 waits in barrier #0 for rank 1, which finished its work"),
            std::string::npos)
      << finished;

  // Rank 0 waits for bytes rank 1 never sends while rank 1 waits in a barrier.
  const std::string crossed = failure_of(
      2,
      [](Communicator& comm) {
        uint8_t b = 0;
        if (comm.rank() == 0)
          comm.recv({.data = &b, .size = 1}, 1);
        else
          comm.barrier();
      },
      milliseconds(200));
  EXPECT_NE(crossed.find("waited 200 ms"), std::string::npos) << crossed;
  EXPECT_NE(crossed.find("rank 1 barrier #0"), std::string::npos) << crossed;

  // A rank whose own work fails: its error, not its peers' echo, comes back.
  const std::string thrown = failure_of(3, [](Communicator& comm) {
    if (comm.rank() == 2) fail(ErrorKind::invalid_argument, "rank two's own error");
    comm.barrier();
  });
  EXPECT_EQ(thrown, "rank two's own error");
}

}  // namespace
}  // namespace h3s::test
