#include "transport/mpi/mpi_bootstrap.h"

#include <utility>

#include "common/error.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {

MpiBootstrap::MpiBootstrap(CollectiveScope scope) : scope_(std::move(scope)) {
  int rank = 0;
  BASP_MPI_CHECK(MPI_Comm_rank(scope_.comm, &rank));
  rank_ = rank;
}

void MpiBootstrap::allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                             const detail::Deadline& deadline) {
  allgather_bytes(scope_, send, bytes, recv, step.c_str(), deadline);
}

std::unique_ptr<MpiBootstrap> parent_bootstrap(basp_mpi_fint_t parent) {
  BASP_CHECK(mpi_alive(), BASP_ERROR_MPI, "MPI is not initialised (or already finalised): call MPI_Init first");
  MPI_Comm comm = MPI_Comm_f2c(parent);
  BASP_CHECK_ARG(comm != MPI_COMM_NULL, "parent (", parent, ") is MPI_COMM_NULL or not a communicator");
  int size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(comm, &size));
  CollectiveScope scope;
  scope.comm = comm;
  scope.members = identity_members(size);
  scope.where = parent_where("parent communicator", size);
  // An abandoned round stays on the caller's communicator, which libbasp never frees (docs/reliability.md).
  return std::make_unique<MpiBootstrap>(std::move(scope));
}

}  // namespace basp::transport::mpi
