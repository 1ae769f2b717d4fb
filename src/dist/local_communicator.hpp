// The in-process test communicator: N ranks are N threads of one process
// that share a LocalGroup (one mutex and condition variable). Each call
// copies bytes from the senders' buffers into the receivers' exactly as NCCL
// would deliver them; no rank ever holds a pointer into another rank's
// memory after a call returns. Used by the rank tests (tests/exec) to run the
// sequence-parallel block on several simulated ranks against the one-rank
// result.
//
// A wrong schedule fails loudly instead of hanging: a rank calling another
// collective than its peers, mismatched byte counts, a peer that finished
// without making the matching call, or a wait past the group's timeout
// throws an Error naming the rank and the call, in every rank of the group.
//
// The ranks' buffers are read and written by the host: ranks on a CPU
// backend (whose ops have completed when they return).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string_view>

#include "dist/communicator.hpp"

namespace h3s {

class LocalGroup {
 public:
  // `timeout`: the longest one call waits for its peers before it fails.
  explicit LocalGroup(int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(2));
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const;
  // Rank r's communicator; call it from one thread at a time.
  Communicator& communicator(int rank);
  // Rank r's work failed: every call waiting now or made later fails, naming it.
  void abort(int rank, std::string_view why);
  // Rank r's work is done: a call waiting for it fails at once.
  void finish(int rank);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Runs work(comm) for ranks 0..ranks-1, one thread each, on one LocalGroup;
// returns when every rank has finished. If any rank threw, rethrows the
// first failure (the others are usually its echo in their waits).
void run_local_ranks(int ranks, const std::function<void(Communicator&)>& work,
                     std::chrono::milliseconds timeout = std::chrono::minutes(2));

}  // namespace h3s
