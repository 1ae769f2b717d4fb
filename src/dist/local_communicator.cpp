// LocalGroup: the rendezvous of the in-process ranks (local_communicator.hpp).
//
// Collectives gather every rank's arguments in one slot per rank; the last
// rank to arrive checks that they agree and copies every rank's bytes, then
// releases the others. Exchanges post their sends as parcels in per-pair
// mailboxes (issue order) and copy their receives from them; a rank leaves
// an exchange when its own parcels have been delivered, as an NCCL group
// completes. Everything happens under one mutex: the test ranks move
// kilobytes, and a single lock keeps the copies and the checks race-free.
#include "dist/local_communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace h3s {

namespace {

enum class Collective : uint8_t { all_gather, all_to_all, barrier };

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_gather:
      return "all_gather";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::barrier:
      return "barrier";
  }
  return "?";
}

// One rank's arguments to the collective being gathered.
struct Posted {
  Collective kind = Collective::barrier;
  int64_t index = 0;  // the rank's count of collectives before this one
  SendBytes send;     // all_gather
  RecvBytes recv;     // all_gather
  std::span<const SendBytes> sends;
  std::span<const RecvBytes> recvs;
};

// A send of an exchange, waiting in its receiver's mailbox. It points into
// the sender's buffer, so the sender stays in the call until it is delivered.
struct Parcel {
  int from = 0, to = 0;
  int64_t exchange = 0;  // the sender's exchange number
  SendBytes bytes;
  bool delivered = false;
};

void copy_bytes(RecvBytes to, SendBytes from) {
  if (from.size > 0) std::memcpy(to.data, from.data, from.size);
}

}  // namespace

struct LocalGroup::State {
  struct RankState {
    std::string doing = "not started";  // for error messages
    bool finished = false;
    int64_t collectives = 0, exchanges = 0;
  };

  int ranks = 0;
  std::chrono::milliseconds timeout{0};
  std::mutex mu;
  std::condition_variable cv;
  // Set once, when the group breaks; every call then throws it.
  std::string error;
  ErrorKind error_kind = ErrorKind::internal;

  std::vector<Posted> posted;  // the collective being gathered, per rank
  std::vector<bool> arrived;
  int arrivals = 0;
  uint64_t completed = 0;  // collectives completed

  // Parcels from rank a to rank b in issue order: mailbox[a * ranks + b].
  std::vector<std::deque<Parcel*>> mailbox;
  std::vector<RankState> rank;
  std::vector<std::unique_ptr<Communicator>> comms;

  std::deque<Parcel*>& box(int from, int to) { return mailbox[size_t(from * ranks + to)]; }

  void throw_if_broken() const {
    if (!error.empty()) throw Error(error_kind, error);
  }
  // Breaks the group with `msg` (unless it is broken already) and throws.
  [[noreturn]] void break_group(ErrorKind kind, std::string msg) {
    if (error.empty()) {
      error = std::move(msg);
      error_kind = kind;
    }
    cv.notify_all();
    throw Error(error_kind, error);
  }
  std::string where_ranks_are() const {
    std::string s;
    for (int r = 0; r < ranks; ++r)
      s += fmt::format("{}rank {} {}", r ? ", " : "", r, rank[size_t(r)].doing);
    return s;
  }

  // Waits (lock held) until ready(). Fails when the group breaks, when
  // stuck() names why ready() can never become true (a peer finished), or
  // after the timeout.
  template <class Ready, class Stuck>
  void wait(std::unique_lock<std::mutex>& lock, int me, Ready ready, Stuck stuck) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!ready()) {
      throw_if_broken();
      if (std::string why = stuck(); !why.empty()) break_group(ErrorKind::invalid_argument, why);
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
        throw_if_broken();
        break_group(ErrorKind::internal,
                    fmt::format("local communicator: rank {} waited {} ms in {}; the ranks: {} "
                                "(their calls do not match: each waits for another)",
                                me, timeout.count(), rank[size_t(me)].doing, where_ranks_are()));
      }
    }
  }

  // Run by the last rank to arrive: check that the ranks' arguments agree,
  // then deliver every rank's bytes.
  void complete_collective() {
    const Posted& first = posted[0];
    const char* name = collective_name(first.kind);
    for (int r = 1; r < ranks; ++r)
      if (posted[size_t(r)].kind != first.kind)
        break_group(ErrorKind::invalid_argument,
                    fmt::format("local communicator: rank {} called {} (its collective #{}) while "
                                "rank 0 called {} (its collective #{}); every rank must make the "
                                "same collective calls in the same order",
                                r, collective_name(posted[size_t(r)].kind), posted[size_t(r)].index,
                                name, first.index));
    if (first.kind == Collective::all_gather) {
      for (int r = 0; r < ranks; ++r) {
        const Posted& p = posted[size_t(r)];
        if (p.send.size != first.send.size)
          break_group(ErrorKind::invalid_argument,
                      fmt::format("local communicator: all_gather #{}: rank {} sends {} bytes, "
                                  "rank 0 sends {}; every rank must send the same count",
                                  p.index, r, p.send.size, first.send.size));
        if (p.recv.size != size_t(ranks) * first.send.size)
          break_group(ErrorKind::invalid_argument,
                      fmt::format("local communicator: all_gather #{}: rank {} receives into {} "
                                  "bytes, the gather of {} ranks x {} bytes needs {}",
                                  p.index, r, p.recv.size, ranks, first.send.size,
                                  size_t(ranks) * first.send.size));
      }
      for (int r = 0; r < ranks; ++r)
        for (int s = 0; s < ranks; ++s) {
          const RecvBytes& all = posted[size_t(r)].recv;
          const SendBytes part = posted[size_t(s)].send;
          copy_bytes(
              {.data = static_cast<char*>(all.data) + size_t(s) * part.size, .size = part.size},
              part);
        }
    } else if (first.kind == Collective::all_to_all) {
      for (int s = 0; s < ranks; ++s)
        for (int r = 0; r < ranks; ++r) {
          const size_t sent = posted[size_t(s)].sends[size_t(r)].size;
          const size_t expected = posted[size_t(r)].recvs[size_t(s)].size;
          if (sent != expected)
            break_group(ErrorKind::invalid_argument,
                        fmt::format("local communicator: all_to_all #{}: rank {} sends {} bytes "
                                    "to rank {}, which expects {} bytes from it",
                                    first.index, s, sent, r, expected));
        }
      for (int s = 0; s < ranks; ++s)
        for (int r = 0; r < ranks; ++r)
          copy_bytes(posted[size_t(r)].recvs[size_t(s)], posted[size_t(s)].sends[size_t(r)]);
    }
    std::fill(arrived.begin(), arrived.end(), false);
    arrivals = 0;
    ++completed;
    cv.notify_all();
  }
};

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalGroup::State& group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.ranks; }

  void all_gather(SendBytes send, RecvBytes recv) override {
    Posted p;
    p.kind = Collective::all_gather;
    p.send = send;
    p.recv = recv;
    collective(p);
  }
  void all_to_all(std::span<const SendBytes> send, std::span<const RecvBytes> recv) override {
    if (send.size() != size_t(g_.ranks) || recv.size() != size_t(g_.ranks)) {
      const std::lock_guard<std::mutex> lock(g_.mu);
      g_.break_group(ErrorKind::invalid_argument,
                     fmt::format("local communicator: rank {} passed {} send and {} receive "
                                 "buffers to all_to_all; a group of {} ranks needs one per rank",
                                 rank_, send.size(), recv.size(), g_.ranks));
    }
    Posted p;
    p.kind = Collective::all_to_all;
    p.sends = send;
    p.recvs = recv;
    collective(p);
  }
  void barrier() override {
    Posted p;
    p.kind = Collective::barrier;
    collective(p);
  }
  void exchange(std::span<const PeerSend> sends, std::span<const PeerRecv> recvs) override;

 private:
  LocalGroup::State::RankState& me() { return g_.rank[size_t(rank_)]; }
  void collective(Posted mine);

  LocalGroup::State& g_;
  const int rank_;
};

void LocalCommunicator::collective(Posted mine) {
  std::unique_lock<std::mutex> lock(g_.mu);
  g_.throw_if_broken();
  mine.index = me().collectives++;
  me().doing = fmt::format("{} #{}", collective_name(mine.kind), mine.index);
  // The previous collective released every slot before any rank could leave
  // it, so this rank's slot is free.
  g_.posted[size_t(rank_)] = mine;
  g_.arrived[size_t(rank_)] = true;
  const uint64_t generation = g_.completed;
  if (++g_.arrivals == g_.ranks) {
    g_.complete_collective();
  } else {
    g_.wait(
        lock, rank_, [&] { return g_.completed != generation; },
        [&] {
          for (int r = 0; r < g_.ranks; ++r)
            if (!g_.arrived[size_t(r)] && g_.rank[size_t(r)].finished)
              return fmt::format(
                  "local communicator: rank {} waits in {} for rank {}, which finished its "
                  "work without calling it",
                  rank_, me().doing, r);
          return std::string();
        });
  }
  me().doing = fmt::format("idle after {} #{}", collective_name(mine.kind), mine.index);
}

void LocalCommunicator::exchange(std::span<const PeerSend> sends, std::span<const PeerRecv> recvs) {
  std::unique_lock<std::mutex> lock(g_.mu);
  g_.throw_if_broken();
  const int64_t index = me().exchanges++;
  me().doing = fmt::format("exchange #{}", index);
  const auto check_peer = [&](int peer, const char* verb) {
    if (peer < 0 || peer >= g_.ranks)
      g_.break_group(ErrorKind::invalid_argument,
                     fmt::format("local communicator: rank {} {} rank {} in exchange #{}, in a "
                                 "group of {} ranks",
                                 rank_, verb, peer, index, g_.ranks));
  };
  for (const PeerSend& s : sends) check_peer(s.peer, "sends to");
  for (const PeerRecv& r : recvs) check_peer(r.peer, "receives from");

  std::vector<Parcel> parcels(sends.size());
  // Parcels still in a mailbox point into this frame: withdraw them however
  // the call ends (runs before `lock` is released).
  struct Withdraw {
    LocalGroup::State& g;
    std::vector<Parcel>& parcels;
    ~Withdraw() {
      for (Parcel& p : parcels)
        if (!p.delivered) std::erase(g.box(p.from, p.to), &p);
    }
  } withdraw{g_, parcels};
  for (size_t i = 0; i < sends.size(); ++i) {
    parcels[i] = {.from = rank_,
                  .to = sends[i].peer,
                  .exchange = index,
                  .bytes = sends[i].bytes,
                  .delivered = false};
    g_.box(rank_, sends[i].peer).push_back(&parcels[i]);
  }
  g_.cv.notify_all();

  for (const PeerRecv& r : recvs) {
    std::deque<Parcel*>& box = g_.box(r.peer, rank_);
    me().doing = fmt::format("exchange #{} (receiving from rank {})", index, r.peer);
    g_.wait(
        lock, rank_, [&] { return !box.empty(); },
        [&] {
          if (r.peer == rank_)
            return fmt::format(
                "local communicator: rank {} receives from itself in exchange #{} without a "
                "send to itself before it",
                rank_, index);
          if (g_.rank[size_t(r.peer)].finished)
            return fmt::format(
                "local communicator: rank {} waits in exchange #{} for bytes from rank {}, "
                "which finished its work without sending them",
                rank_, index, r.peer);
          return std::string();
        });
    Parcel* p = box.front();
    if (p->bytes.size != r.bytes.size)
      g_.break_group(
          ErrorKind::invalid_argument,
          fmt::format("local communicator: rank {} receives {} bytes from rank {} in "
                      "its exchange #{}, but rank {} sent {} bytes (its exchange #{})",
                      rank_, r.bytes.size, r.peer, index, r.peer, p->bytes.size, p->exchange));
    box.pop_front();
    copy_bytes(r.bytes, p->bytes);
    p->delivered = true;
    g_.cv.notify_all();
  }

  me().doing = fmt::format("exchange #{} (its sends not yet received)", index);
  g_.wait(
      lock, rank_,
      [&] {
        return std::all_of(parcels.begin(), parcels.end(),
                           [](const Parcel& p) { return p.delivered; });
      },
      [&] {
        for (const Parcel& p : parcels) {
          if (p.delivered) continue;
          if (p.to == rank_)
            return fmt::format(
                "local communicator: rank {} sends to itself in exchange #{} without "
                "receiving from itself",
                rank_, index);
          if (g_.rank[size_t(p.to)].finished)
            return fmt::format(
                "local communicator: rank {} waits in exchange #{} for rank {} to receive its "
                "bytes, but rank {} finished its work",
                rank_, index, p.to, p.to);
        }
        return std::string();
      });
  me().doing = fmt::format("idle after exchange #{}", index);
}

}  // namespace

LocalGroup::LocalGroup(int ranks, std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  if (ranks < 1)
    fail(ErrorKind::invalid_argument, "local communicator: {} ranks; a group needs at least 1",
         ranks);
  State& s = *state_;
  s.ranks = ranks;
  s.timeout = timeout;
  s.posted.resize(size_t(ranks));
  s.arrived.assign(size_t(ranks), false);
  s.mailbox.resize(size_t(ranks) * size_t(ranks));
  s.rank.resize(size_t(ranks));
  for (int r = 0; r < ranks; ++r) s.comms.push_back(std::make_unique<LocalCommunicator>(s, r));
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const {
  return state_->ranks;
}

Communicator& LocalGroup::communicator(int rank) {
  H3S_CHECK(rank >= 0 && rank < state_->ranks);
  return *state_->comms[size_t(rank)];
}

void LocalGroup::abort(int rank, std::string_view why) {
  const std::lock_guard<std::mutex> lock(state_->mu);
  state_->rank[size_t(rank)].doing = "stopped";
  if (state_->error.empty()) {
    state_->error = fmt::format("local communicator: rank {} stopped: {}", rank, why);
    state_->error_kind = ErrorKind::internal;
  }
  state_->cv.notify_all();
}

void LocalGroup::finish(int rank) {
  const std::lock_guard<std::mutex> lock(state_->mu);
  state_->rank[size_t(rank)].finished = true;
  state_->rank[size_t(rank)].doing = "finished";
  state_->cv.notify_all();
}

void run_local_ranks(int ranks, const std::function<void(Communicator&)>& work,
                     std::chrono::milliseconds timeout) {
  LocalGroup group(ranks, timeout);
  std::mutex mu;
  std::exception_ptr first_failure;
  const auto run_rank = [&](int r) {
    try {
      work(group.communicator(r));
      group.finish(r);
    } catch (const std::exception& e) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (!first_failure) first_failure = std::current_exception();
      }
      group.abort(r, e.what());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(ranks));
  for (int r = 0; r < ranks; ++r) threads.emplace_back(run_rank, r);
  for (std::thread& t : threads) t.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

}  // namespace h3s
