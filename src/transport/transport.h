// Moving bytes: the small interface every backend implements (MPI on host memory now; NCCL on device memory
// and intra-node load/store transports later). A GroupTransport is one rank's connection to its group; it
// turns an ExchangePlan into a PlanExecutor that owns everything execute needs (workspace, datatypes, a private
// communicator), so that scatter and gather allocate nothing and create no communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "basp/basp.h"
#include "common/error.h"
#include "plan/exchange.h"
#include "runtime/consistency.h"
#include "transport/health.h"

namespace basp::transport {

class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  // inputs/outputs hold one pointer per tensor of the plan; `stream` is backend-specific (NULL for MPI).
  virtual void scatter(const void* const* inputs, void* const* outputs, void* stream) = 0;
  virtual void gather(const void* const* inputs, void* const* outputs, void* stream) = 0;
  virtual int64_t workspace_bytes() const = 0;
  // basp_path_t of the last scatter/gather (BASP_PATH_NONE before the first).
  virtual int32_t last_path() const { return BASP_PATH_NONE; }
};

class GroupTransport {
 public:
  virtual ~GroupTransport() = default;
  virtual basp_backend_t backend() const = 0;
  // Whether the comm is still usable (transport/health.h), shared by the comm and its plans.
  Health& health() { return health_; }
  // Collective over the group, the first step of every collective call (docs/reliability.md): returns when every
  // rank of the group described the same call, else throws BASP_ERROR_MISMATCH (on every rank) or
  // BASP_ERROR_TIMEOUT. The default checks nothing (a backend whose group has a single rank only).
  virtual void agree(const runtime::CallRecord& mine) { (void)mine; }
  // Collective over the group.
  virtual std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan) = 0;
  // Collective over the group: memory the group's ranks can reach directly (basp_mem_alloc), and its release.
  virtual void* alloc_shared(size_t bytes) {
    (void)bytes;
    detail::fail(BASP_ERROR_UNSUPPORTED, "this backend has no shared memory (only BASP_BACKEND_MPI has)");
  }
  virtual void free_shared(void* ptr) {
    (void)ptr;
    detail::fail(BASP_ERROR_UNSUPPORTED, "this backend has no shared memory (only BASP_BACKEND_MPI has)");
  }
  // An error the backend raised asynchronously (NCCL's ncclCommGetAsyncError): BASP_SUCCESS when there is none,
  // else its status, with the detail in `message`. Backends that fail synchronously (MPI) never have one.
  virtual basp_status_t async_error(std::string& message) {
    (void)message;
    return BASP_SUCCESS;
  }
  // Stops the backend's outstanding operations and releases its communicators; later executes of the comm's
  // plans fail. Only backends that can abort one communicator without ending the process support it.
  virtual void abort() {
    detail::fail(BASP_ERROR_UNSUPPORTED, "this backend cannot abort a communicator (only BASP_BACKEND_NCCL can)");
  }

 private:
  Health health_;
};

}  // namespace basp::transport
