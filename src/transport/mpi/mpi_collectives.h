// Deadline-bounded collectives of the MPI backend (docs/reliability.md).
//
// agree(): the cross-rank consistency check, the first step of every collective call of the MPI backend (comm
// creation over the parent, plan creation and basp_mem_alloc/free over the group):
//  round 1  MPI_Iallreduce(MIN) of {fingerprint, ~fingerprint}: every rank learns the smallest and the largest
//           fingerprint, so whether all records are equal, from one small reduction.
//  on a difference: MPI_Iallgather of the records, and every rank fails with BASP_ERROR_MISMATCH naming the
//           fields that differ, their values and the ranks holding them (the same message on every rank).
//  round 2  MPI_Iallreduce of the ranks' presence only. A rank that arrives after the others gave up on round 1
//           completes round 1 with their stale contributions; round 2, which they never join, makes it time out
//           too, instead of letting it go on into a blocking call (MPI_Comm_split has no non-blocking form)
//           that would hang it.
// After agree() every rank of the communicator is inside the same call, so the steps that follow complete
// unless a rank dies or stops in the middle; they are bounded by the same deadline anyway where MPI has a
// non-blocking form (allgather_bytes, allreduce_min below).
//
// A collective that times out is abandoned (MPI can neither cancel nor free it): its buffers are kept forever on
// purpose and `*abandoned` is set: the communicator must never be freed afterwards.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "runtime/consistency.h"

namespace basp::transport::mpi {

struct CollectiveScope {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int32_t> labels;  // how each rank of `comm` is called in messages (its world or parent rank)
  std::string where;            // "group 0 (world ranks 0..3)", "the parent communicator (4 ranks)"
  bool* abandoned = nullptr;    // set when a collective on `comm` was abandoned
};

// Returns when every rank described the same call (their local_status included); throws BASP_ERROR_MISMATCH
// (every rank) or BASP_ERROR_TIMEOUT. `what` names the call in messages ("basp_plan_create").
void agree(const CollectiveScope& scope, const runtime::CallRecord& mine, const detail::Deadline& deadline);

// MPI_Iallgather of `bytes` per rank into `out` (size * bytes), by the deadline.
void allgather_bytes(const CollectiveScope& scope, const void* mine, size_t bytes, void* out, const char* step,
                     const detail::Deadline& deadline);

// MPI_Iallreduce(MIN) of `n` int64 values in place, by the deadline (for a maximum, negate).
void allreduce_min(const CollectiveScope& scope, int64_t* values, int n, const char* step,
                   const detail::Deadline& deadline);

}  // namespace basp::transport::mpi
