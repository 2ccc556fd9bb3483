// The host workspace of the MPI paths that pack (p2p, cma): a plan's own, or the comm's pool that its batch plans
// share (docs/batch.md), handed to the path at creation. Grown there, never during an execute. The pool is two
// workspaces, one per direction: every batch plan's scatters use the one, its gathers the other, so a gather that
// sums held heads, whose earlier chunks' contributions wait in its workspace until its last chunk, shares no byte
// with the scatters that run between its chunks (docs/overlap.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/direction.h"

namespace basp::transport::mpi {

class Workspace {
 public:
  // `what` names it in an out-of-memory error ("the batch plans' workspace").
  explicit Workspace(std::string what) : what_(std::move(what)) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At creation: at least `bytes` from now on (pages faulted in now, not in the first execute). Growing moves the
  // workspace, its bytes kept (a gather's contributions may wait there between its chunks), the rest zeroed; the
  // caller makes sure no exchange runs meanwhile (batch plans are made in the comm's queue order).
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

// The workspaces a path packs in, per direction: a plan's own one for both, or the comm's batch pool, one each.
struct DirectionWorkspaces {
  std::shared_ptr<Workspace> scatter;
  std::shared_ptr<Workspace> gather;

  static DirectionWorkspaces one(std::shared_ptr<Workspace> both) { return {both, both}; }
  Workspace& of(Direction d) const { return d == Direction::kScatter ? *scatter : *gather; }
  // At path creation: at least `bytes` in each.
  void reserve(int64_t bytes) const {
    scatter->reserve(bytes);
    gather->reserve(bytes);
  }
};

}  // namespace basp::transport::mpi
