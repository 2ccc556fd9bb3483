// Deadline-bounded collectives of the MPI backend (docs/reliability.md): the host-side steps of comm creation,
// plan creation and basp_mem_alloc/free, never an exchange.
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

namespace basp::transport::mpi {

struct CollectiveScope {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int32_t> members;  // the world (or parent) rank of each rank of `comm`, as messages call it
  std::string where;             // "group 0 (world ranks 0..3)", "the parent communicator (4 ranks)"
  bool* abandoned = nullptr;     // set when a collective on `comm` was abandoned
};

// MPI_Iallgather of `bytes` per rank into `out` (size * bytes), by the deadline.
void allgather_bytes(const CollectiveScope& scope, const void* mine, size_t bytes, void* out, const char* step,
                     const detail::Deadline& deadline);

// MPI_Iallreduce(MIN) of `n` int64 values in place, by the deadline (for a maximum, negate).
void allreduce_min(const CollectiveScope& scope, int64_t* values, int n, const char* step,
                   const detail::Deadline& deadline);

}  // namespace basp::transport::mpi
