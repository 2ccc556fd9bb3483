// basp_comm_create_mpi: the creation algorithm (runtime/create.h) over an MPI communicator; the MPI backend, or the
// NCCL backend bootstrapped over MPI.
#include "common/error.h"
#include "runtime/create.h"
#if BASP_HAVE_MPI
#include "transport/mpi/mpi_backend.h"
#include "transport/mpi/mpi_bootstrap.h"
#endif

namespace basp::runtime {

std::shared_ptr<Comm> comm_from_mpi(basp_mpi_fint_t parent, const CreateCall& call) {
  const EntryCheck check = [](const CommOptions& options) {
    if (options.backend == BASP_BACKEND_NCCL) require_nccl_build("basp_comm_create_mpi");
  };
#if BASP_HAVE_MPI
  std::unique_ptr<transport::mpi::MpiBootstrap> boot;
  try {
    boot = transport::mpi::parent_bootstrap(parent);
  } catch (const detail::Error&) {
    fail_without_parent(call, check, std::current_exception());
  }
  return create_comm(*boot, call, check, [&](const CommOptions& options) -> std::unique_ptr<transport::Connector> {
    if (options.backend == BASP_BACKEND_NCCL) return nccl_init_connector(*boot);
    return transport::mpi::make_connector(*boot);
  });
#else
  (void)parent;
  fail_without_parent(call, check,
                      std::make_exception_ptr(detail::Error(BASP_ERROR_UNSUPPORTED,
                                                            "this libbasp was built without MPI (BASP_ENABLE_MPI)")));
#endif
}

}  // namespace basp::runtime
