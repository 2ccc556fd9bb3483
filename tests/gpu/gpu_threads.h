// Helpers of the GPU tests that run one thread per GPU as one rank each (test_gpu_nccl_threads,
// test_gpu_nccl_batch): the failures of all threads, a barrier where the ranks meet, and one rank's tensors of an
// exchange check.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "expected_tensors.h"
#include "gpu_util.h"

namespace basp::test {

// Failures of all threads: printed at once (a failed rank can leave the others waiting in NCCL, and the log must
// show why), counted for the end.
struct Failures {
  std::mutex mutex;
  int64_t failed = 0;
  int64_t checks = 0;
  void check(bool ok, int rank, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    ++checks;
    if (!ok) {
      ++failed;
      std::printf("FAILED: rank %d: %s\n", rank, what.c_str());
      std::fflush(stdout);
    }
  }
};

// All ranks meet here: allocations and uploads of every rank finish before any exchange starts, and every
// exchange has finished before any rank frees memory (cudaMalloc/cudaFree on one thread while an NCCL kernel
// waits for it on another can deadlock a single process).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return round_ != round; });
  }
  // A meeting that also tells whether `mine` was true on every rank.
  bool all(bool mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    if (!mine) any_false_ = true;
    if (++arrived_ == n_) {
      arrived_ = 0;
      last_all_ = !any_false_;
      any_false_ = false;
      ++round_;
      cv_.notify_all();
      return last_all_;
    }
    cv_.wait(lock, [&] { return round_ != round; });
    return last_all_;  // the next round cannot end before this rank arrives at it
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  int64_t round_ = 0;
  bool any_false_ = false;
  bool last_all_ = true;
};

// One rank's tensors of a scatter-then-gather check, one per geometry: `seq` its sequence-sharded input (the
// coordinate data of `seed` at `position`: seq_input), `head` and `back` the scatter's and the gather's outputs,
// poisoned. Filled on the legacy stream and synchronised, so a non-blocking stream may use them at once.
struct ExchangeTensors {
  std::vector<DeviceBytes> seq, head, back;
};

inline ExchangeTensors exchange_tensors(uint64_t seed, const std::vector<layout::Geometry>& geoms, int64_t position) {
  ExchangeTensors x;
  for (size_t t = 0; t < geoms.size(); ++t) {
    const int64_t bytes = geoms[t].seq_tensor_bytes(0);
    x.seq.emplace_back(bytes);
    x.head.emplace_back(bytes);
    x.back.emplace_back(bytes);
    x.seq[t].upload(seq_input(seed, geoms[t], static_cast<int32_t>(t), position));
    x.head[t].fill(kPoison);
    x.back[t].fill(kPoison);
  }
  TEST_CUDA(cudaDeviceSynchronize());
  return x;
}

// Runs rank_main(l, n, parent_l, failures, barrier) on one thread per GPU 0..n-1, each rank l with its own parent
// communicator from ncclCommInitAll, and releases the parents after: destroyed, or aborted after a failure (a
// collective may still be enqueued on them, and destroy would wait for it). False when ncclCommInitAll failed.
template <typename RankMain>
bool run_ranks(int n, RankMain rank_main, Failures& failures) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  std::vector<int> list(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) list[static_cast<size_t>(i)] = i;
  const ncclResult_t rc = ncclCommInitAll(comms.data(), n, list.data());
  if (rc != ncclSuccess) {
    std::printf("FAILED: ncclCommInitAll over %d GPUs: %s\n", n, ncclGetErrorString(rc));
    return false;
  }
  Barrier barrier(n);
  std::vector<std::thread> threads;
  for (int l = 0; l < n; ++l) {
    threads.emplace_back(rank_main, l, n, comms[static_cast<size_t>(l)], std::ref(failures), std::ref(barrier));
  }
  for (auto& t : threads) t.join();
  for (ncclComm_t c : comms) {
    if (failures.failed == 0) {
      ncclCommDestroy(c);
    } else {
      ncclCommAbort(c);
    }
  }
  return true;
}

}  // namespace basp::test
