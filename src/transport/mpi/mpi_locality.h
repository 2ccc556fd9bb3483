// Gathers every rank's locality record (topology/rank_locality.h) over an MPI communicator, for placement.
#pragma once

#include <mpi.h>

#include <vector>

#include "topology/rank_locality.h"

namespace basp::transport::mpi {

// Collective over `comm`: the records of all ranks, by rank (one MPI_Allgather of a fixed-size record).
std::vector<topology::RankLocality> allgather_locality(MPI_Comm comm, const topology::RankLocality& mine);

}  // namespace basp::transport::mpi
