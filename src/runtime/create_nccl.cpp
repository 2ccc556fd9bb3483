// basp_comm_create_nccl: the creation algorithm (runtime/create.h) over a parent NCCL communicator, split into the
// groups with ncclCommSplit.
#include "common/error.h"
#include "runtime/create.h"
#if BASP_HAVE_NCCL
#include "transport/nccl/nccl_backend.h"
#include "transport/nccl/nccl_bootstrap.h"
#endif

namespace basp::runtime {

std::shared_ptr<Comm> comm_from_nccl(void* nccl_comm, const CreateCall& call) {
  const EntryCheck check = [](const CommOptions& options) {
    BASP_CHECK_ARG(options.backend == BASP_BACKEND_NCCL, "config->backend (", static_cast<int>(options.backend),
                   ") is not BASP_BACKEND_NCCL: basp_comm_create_nccl builds NCCL comms");
    require_nccl_build("basp_comm_create_nccl");
  };
#if BASP_HAVE_NCCL
  std::unique_ptr<transport::nccl::NcclBootstrap> parent;
  try {
    BASP_CHECK(nccl_comm != nullptr, BASP_ERROR_NULL_POINTER, "nccl_comm is NULL");
    parent = transport::nccl::parent_bootstrap(static_cast<ncclComm_t>(nccl_comm));
  } catch (const detail::Error&) {
    fail_without_parent(call, check, std::current_exception());
  }
  return create_comm(*parent, call, check,
                     [&](const CommOptions&) { return transport::nccl::make_split_connector(*parent); });
#else
  try {
    BASP_CHECK(nccl_comm != nullptr, BASP_ERROR_NULL_POINTER, "nccl_comm is NULL");
  } catch (const detail::Error&) {
    fail_without_parent(call, check, std::current_exception());
  }
  fail_without_parent(
      call, check,
      std::make_exception_ptr(detail::Error(
          BASP_ERROR_UNSUPPORTED, "this libbasp was built without CUDA + NCCL (BASP_ENABLE_CUDA, NCCL_ROOT)")));
#endif
}

}  // namespace basp::runtime
