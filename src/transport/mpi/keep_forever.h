// Memory that an abandoned MPI operation may still read or write (mpi_wait.h, mpi_collectives.h): a collective
// that timed out, a send MPI could not cancel. It is kept for the life of the process in one registry, so it is
// never freed under MPI's feet, and it stays reachable, so a leak checker does not report it as lost.
#pragma once

#include <memory>

namespace basp::transport::mpi {

void keep_forever(std::shared_ptr<void> memory);

}  // namespace basp::transport::mpi
