// NCCL communicators bootstrapped over MPI: what basp_comm_create_mpi builds when config->backend is
// BASP_BACKEND_NCCL. Only in builds with both MPI and NCCL.
#pragma once

#include <memory>

#include "basp/basp.h"
#include "runtime/comm.h"

namespace basp::transport::nccl {

// Collective over the MPI parent (its Fortran handle). Each rank uses its current CUDA device (cudaSetDevice
// first). The first rank of every group creates the group's ncclUniqueId and broadcasts it over an MPI group
// communicator; the group's ranks then create the NCCL communicator with ncclCommInitRank.
std::shared_ptr<runtime::Comm> create_comm_mpi(basp_mpi_fint_t parent, const runtime::CommOptions& options);

}  // namespace basp::transport::nccl
