// The host workspace of the MPI paths that pack (p2p, cma): a plan's own, or the comm's pool that its batch plans
// share (docs/batch.md), handed to the path at creation. Grown there, never during an execute; batch plans execute
// one at a time, so one pool serves them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace basp::transport::mpi {

class Workspace {
 public:
  // `what` names it in an out-of-memory error ("the batch plans' workspace").
  explicit Workspace(std::string what) : what_(std::move(what)) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At creation: at least `bytes` from now on, zeroed (pages faulted in now, not in the first execute).
  void reserve(int64_t bytes);
  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // A send MPI could not take back, or a peer past its timeout, may still read it: kept for the life of the process.
  void pin() { pinned_ = true; }

 private:
  std::string what_;
  std::byte* data_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
};

}  // namespace basp::transport::mpi
