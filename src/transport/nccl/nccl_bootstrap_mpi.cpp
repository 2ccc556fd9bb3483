#include "transport/nccl/nccl_bootstrap_mpi.h"

#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "transport/mpi/mpi_locality.h"
#include "transport/mpi/mpi_util.h"
#include "transport/nccl/nccl_locality.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

using mpi::OwnedComm;

std::shared_ptr<runtime::Comm> create_comm_mpi(basp_mpi_fint_t parent, const runtime::CommOptions& options) {
  BASP_CHECK(mpi::mpi_alive(), BASP_ERROR_MPI, "MPI is not initialised (or already finalised): call MPI_Init first");
  MPI_Comm parent_comm = MPI_Comm_f2c(parent);
  BASP_CHECK_ARG(parent_comm != MPI_COMM_NULL, "parent (", parent, ") is MPI_COMM_NULL or not a communicator");
  OwnedComm world = mpi::dup_with_errors_return(parent_comm);
  int size = 0;
  int rank = 0;
  BASP_MPI_CHECK(MPI_Comm_size(world.get(), &size));
  BASP_MPI_CHECK(MPI_Comm_rank(world.get(), &rank));
  // Argument errors first, identical on every rank: G must divide N and B.
  plan::resolve_num_groups(size, options.micro_batch, options.num_groups);

  // Every rank learns whether all ranks have a device before any of them waits in NCCL's bootstrap, so a rank
  // without one makes every rank fail instead of leaving the others hanging.
  int device = -1;
  int have_device = 1;
  std::string no_device;
  try {
    device = require_device("the NCCL backend");
  } catch (const detail::Error& e) {
    have_device = 0;
    no_device = e.what();
  }
  int all_have_device = 0;
  BASP_MPI_CHECK(MPI_Allreduce(&have_device, &all_have_device, 1, MPI_INT, MPI_MIN, world.get()));
  BASP_CHECK(have_device, BASP_ERROR_CUDA, no_device);
  BASP_CHECK(all_have_device, BASP_ERROR_CUDA,
             "the NCCL backend needs a CUDA device on every rank: another rank of "
             "the parent communicator has none");

  // Placement from every rank's GPU and node, gathered over MPI (the same records the NCCL path gathers).
  const std::vector<topology::RankLocality> locality = mpi::allgather_locality(world.get(), local_gpu_locality(device));
  plan::GroupLayout layout = runtime::plan_groups(size, options, locality);

  const int32_t position = layout.position_of[rank];
  MPI_Comm group = MPI_COMM_NULL;
  BASP_MPI_CHECK(MPI_Comm_split(world.get(), layout.group_of[rank], position, &group));
  OwnedComm group_owned(group);

  // The root's ncclGetUniqueId result travels with the id, so that a failure there fails the whole group.
  struct {
    int32_t result;
    ncclUniqueId id;
  } root{};
  if (position == 0) root.result = static_cast<int32_t>(ncclGetUniqueId(&root.id));
  BASP_MPI_CHECK(MPI_Bcast(&root, static_cast<int>(sizeof(root)), MPI_BYTE, 0, group));
  BASP_CHECK(root.result == ncclSuccess, BASP_ERROR_NCCL, "ncclGetUniqueId failed on the group's first rank: ",
             ncclGetErrorString(static_cast<ncclResult_t>(root.result)));

  ncclComm_t comm = nullptr;
  BASP_NCCL_CHECK(ncclCommInitRank(&comm, layout.group_size, root.id, position));
  auto made = make_comm(std::move(layout), rank, options.placement, options.timeout_ms, comm, device);
  connect_group(*made, detail::Deadline(options.timeout_ms));
  return made;
}

}  // namespace basp::transport::nccl
