// transport::Bootstrap over an MPI communicator: the parent of basp_comm_create_mpi (the caller's communicator,
// never freed by libbasp, so an abandoned round can stay on it) and the group collectives of an MPI comm.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "transport/bootstrap.h"
#include "transport/mpi/mpi_collectives.h"

namespace basp::transport::mpi {

class MpiBootstrap final : public Bootstrap {
 public:
  // `scope.comm` stays the caller's (or the owner's): the bootstrap frees nothing.
  explicit MpiBootstrap(CollectiveScope scope);

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(scope_.members.size()); }
  const std::vector<int32_t>& members() const override { return scope_.members; }
  const std::string& where() const override { return scope_.where; }
  void allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                 const detail::Deadline& deadline) override;

  MPI_Comm comm() const { return scope_.comm; }
  const CollectiveScope& scope() const { return scope_; }

 private:
  CollectiveScope scope_;
  int32_t rank_ = 0;
};

// The parent of basp_comm_create_mpi, from its Fortran handle. Throws at once when MPI is not initialised or
// `parent` is MPI_COMM_NULL: then nothing reaches the other ranks.
std::unique_ptr<MpiBootstrap> parent_bootstrap(basp_mpi_fint_t parent);

}  // namespace basp::transport::mpi
