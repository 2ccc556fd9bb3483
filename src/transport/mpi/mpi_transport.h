// The MPI backend: host memory, point-to-point inside each group.
#pragma once

#include <memory>

#include "basp/basp.h"
#include "runtime/comm.h"

namespace basp::transport::mpi {

// Collective over the parent communicator (given as its Fortran handle): the consistency check of comm creation
// (mpi_collectives.h), bounded by `timeout_ms`, that every backend's comm creation over MPI runs first. Throws
// BASP_ERROR_MISMATCH on every rank when the ranks' records differ, BASP_ERROR_TIMEOUT when a rank does not join.
void agree_on_parent(basp_mpi_fint_t parent, const runtime::CallRecord& mine, int64_t timeout_ms);

// Collective over the parent communicator (given as its Fortran handle), after agree_on_parent(): forms the
// groups and splits the parent into group communicators once.
std::shared_ptr<runtime::Comm> create_comm(basp_mpi_fint_t parent, const runtime::CommOptions& options);

}  // namespace basp::transport::mpi
