#include "transport/nccl/nccl_group_comm.h"

#include <functional>

#include "common/error.h"

namespace basp::transport::nccl {

GroupComm::GroupComm(ncclComm_t comm, int device) : comm_(comm), device_(device) {}

GroupComm::~GroupComm() {
  if (aborted_.load()) return;
  // NCCL: a communicator with an asynchronous error must be aborted; ncclCommDestroy would wait for its
  // outstanding work, which may never finish. Asked once more here (it does not block), in case nobody queried.
  ncclResult_t state = ncclSuccess;
  const bool failed = errored_.load() || ncclCommGetAsyncError(comm_, &state) != ncclSuccess ||
                      (state != ncclSuccess && state != ncclInProgress);
  if (failed) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

ncclComm_t GroupComm::get(const char* op) const {
  BASP_CHECK(!aborted_.load(), BASP_ERROR_NCCL, op, ": the comm was aborted (basp_comm_abort); destroy its plans");
  return comm_;
}

basp_status_t GroupComm::async_error(std::string& message) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.load()) {
    message = "the comm was aborted (basp_comm_abort)";
    return BASP_ERROR_NCCL;
  }
  ncclResult_t state = ncclSuccess;
  BASP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
  // ncclInProgress only means a non-blocking operation has not finished: nothing failed.
  if (state == ncclSuccess || state == ncclInProgress) return BASP_SUCCESS;
  errored_.store(true);
  message = std::string(ncclGetErrorString(state));
  const char* detail = ncclGetLastError(comm_);
  if (detail != nullptr && detail[0] != '\0') message += std::string(": ") + detail;
  return BASP_ERROR_NCCL;
}

void GroupComm::allgather(const void* send, size_t bytes, void* recv, const std::string& step, const std::string& where,
                          const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm_, &size));
  collective(allgather_op(send, bytes, recv, size), step, where, deadline);
}

void GroupComm::alltoall(const void* send, size_t bytes_per_peer, void* recv, const std::string& step,
                         const std::string& where, const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm_, &size));
  collective(alltoall_op(send, bytes_per_peer, recv, size), step, where, deadline);
}

void GroupComm::collective(const HostCollective& op, const std::string& step, const std::string& where,
                           const detail::Deadline& deadline) {
  get(step.c_str());
  const EnqueueGuard guard = [this, &step](const std::function<void()>& enqueue) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    get(step.c_str());  // an abort may have come since
    enqueue();
  };
  try {
    collective_to_host(comm_, device_, op, step, where, deadline, guard);
  } catch (const detail::Error&) {
    // A timeout leaves the all-gather enqueued; any other failure leaves the communicator in an unknown state.
    // Either way it is aborted, not destroyed, when released.
    errored_.store(true);
    throw;
  }
  BASP_CHECK(!aborted_.load(), BASP_ERROR_NCCL, step, ": the comm was aborted (basp_comm_abort) during it");
}

void GroupComm::abort() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.exchange(true)) return;
  BASP_NCCL_CHECK(ncclCommAbort(comm_));
}

}  // namespace basp::transport::nccl
