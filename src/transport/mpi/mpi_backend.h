// The MPI backend (host memory): its part of comm creation over an MPI parent, and the group transport it
// connects: one group communicator from MPI_Comm_split, a duplicate of it for every plan's control messages
// (control.h), the comm's basp_mem_alloc memory (shared_memory.h), and one executor per plan (mpi_executor.h).
#pragma once

#include <memory>

#include "transport/mpi/mpi_bootstrap.h"
#include "transport/transport.h"

namespace basp::transport::mpi {

// `parent` must outlive the connector (it is used at connect()).
std::unique_ptr<Connector> make_connector(MpiBootstrap& parent);

}  // namespace basp::transport::mpi
