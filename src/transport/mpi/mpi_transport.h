// The MPI backend: host memory, point-to-point inside each group.
#pragma once

#include <memory>

#include "basp/basp.h"
#include "runtime/comm.h"

namespace basp::transport::mpi {

// Collective over the parent communicator (given as its Fortran handle): forms the groups and splits the
// parent into group communicators once.
std::shared_ptr<runtime::Comm> create_comm(basp_mpi_fint_t parent, const runtime::CommOptions& options);

}  // namespace basp::transport::mpi
