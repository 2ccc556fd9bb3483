#include "transport/mpi/mpi_locality.h"

#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {

std::vector<topology::RankLocality> allgather_locality(MPI_Comm comm, const topology::RankLocality& mine) {
  int size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<topology::RankLocality> all(static_cast<size_t>(size));
  constexpr int bytes = static_cast<int>(sizeof(topology::RankLocality));
  BASP_MPI_CHECK(MPI_Allgather(&mine, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, comm));
  return all;
}

}  // namespace basp::transport::mpi
