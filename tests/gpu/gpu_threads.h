// Helpers of the GPU tests that run one thread per GPU as one rank each (test_gpu_nccl_threads,
// test_gpu_nccl_batch): the failures of all threads, and a barrier where the ranks meet.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

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

}  // namespace basp::test
