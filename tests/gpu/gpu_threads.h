// Helpers of the GPU tests whose ranks are threads of one process, one per GPU (test_gpu_nccl_threads,
// test_gpu_nccl_batch), or, built with BASP_TEST_PROCESSES=1, MPI processes, any number per GPU
// (test_gpu_nccl_procs, test_gpu_nccl_batch_procs: one GPU runs several ranks when every process has its own
// NCCL_HOSTID, which scripts/gpu/rank-env sets): the failures of all ranks, a barrier where the ranks meet, the
// ranks' parent NCCL communicator, and one rank's tensors of an exchange check. The same rank_main runs in both.
#pragma once

#include <nccl.h>
#if BASP_TEST_PROCESSES
#include <mpi.h>
#endif

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

#if BASP_TEST_PROCESSES
// The ranks are MPI processes: they meet in MPI_COMM_WORLD.
class Barrier {
 public:
  explicit Barrier(int) {}
  void wait() { MPI_Barrier(MPI_COMM_WORLD); }
  bool all(bool mine) {
    int in = mine ? 1 : 0;
    int out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return out != 0;
  }
};
#else
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

#endif  // BASP_TEST_PROCESSES

// The CUDA device of rank l: its own GPU with threads; with processes, the GPUs in turn (several ranks a GPU).
inline int device_of(int l) {
#if BASP_TEST_PROCESSES
  int devices = 1;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) devices = 1;
  return l % devices;
#else
  return l;
#endif
}

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

#if BASP_TEST_PROCESSES
// Runs rank_main(l, n, parent, failures, barrier) on this process, rank l of the n of MPI_COMM_WORLD, with a parent
// NCCL communicator of all of them (ncclCommInitRank, the unique id broadcast over MPI) on device_of(l); then
// releases the parent (destroyed, or aborted after a failure anywhere) and adds up every rank's checks and failures
// into `failures` on every rank. False when the parent could not be made on some rank.
template <typename RankMain>
bool run_ranks(int /*n: MPI's*/, RankMain rank_main, Failures& failures) {
  int l = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &l);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  TEST_CUDA(cudaSetDevice(device_of(l)));
  ncclUniqueId id{};
  if (l == 0 && ncclGetUniqueId(&id) != ncclSuccess) std::printf("FAILED: ncclGetUniqueId\n");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t parent = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&parent, n, id, l);
  if (rc != ncclSuccess)
    std::printf("FAILED: rank %d: ncclCommInitRank of %d ranks: %s\n", l, n, ncclGetErrorString(rc));
  Barrier barrier(n);
  if (!barrier.all(rc == ncclSuccess)) {
    if (parent != nullptr) ncclCommAbort(parent);
    return false;
  }
  rank_main(l, n, parent, failures, barrier);
  const bool clean = barrier.all(failures.failed == 0);
  if (clean) {
    ncclCommDestroy(parent);
  } else {
    ncclCommAbort(parent);
  }
  int64_t mine[2] = {failures.checks, failures.failed};
  int64_t sum[2] = {0, 0};
  MPI_Allreduce(mine, sum, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  failures.checks = sum[0];
  failures.failed = sum[1];
  return true;
}

// Rank 0 speaks for all; every rank returns the same code (mpirun reports the first non-zero one).
inline int world_rank() {
  int l = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &l);
  return l;
}

// Whether every rank has a CUDA device (a rank without one prints why); the same answer on every rank.
inline bool every_rank_has_device(const char* program) {
  const bool mine = have_device(program);
  int in = mine ? 1 : 0;
  int out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}
#else
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

#endif  // BASP_TEST_PROCESSES

}  // namespace basp::test
