// A deadline for NCCL exchanges. An execute only enqueues: an exchange that one rank never joins waits on the
// device for ever, and NCCL has no deadline of its own. The watch keeps the end (a CUDA event) of the last exchange
// enqueued on one communicator and when the oldest unfinished one was enqueued; once that exchange is older than
// the comm's timeout, the next execute and basp_comm_get_async_error report BASP_ERROR_TIMEOUT naming it, and the
// communicator is aborted, which ends the hung kernels. One mechanism for ordinary plans (one watch per group
// communicator) and batch plans (one per world communicator, inside BatchShared).
//
// Not covered: an execute captured into a CUDA graph (a query of the event could invalidate the capture, and a
// graph's launches are the caller's), so captured executes have no deadline; and timeout 0 ("wait for ever").
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "basp/basp.h"
#include "transport/nccl/nccl_group_comm.h"

namespace basp::transport::nccl {

// What the watch concludes from the last exchange's event and its age (a pure function, tested on the CPU).
enum class WatchVerdict { kIdle, kRunning, kEnded, kFailed, kOverdue };
WatchVerdict watch_verdict(bool pending, cudaError_t event_state, int64_t waited_ms, int64_t timeout_ms);

class ExchangeWatch {
 public:
  // Made at plan creation (it creates a CUDA event on `comm`'s device), never at execute.
  ExchangeWatch(std::shared_ptr<GroupComm> comm, int64_t timeout_ms);
  // Waits for the last exchange to end, up to the timeout from its enqueue; past it, aborts the communicator.
  ~ExchangeWatch();
  ExchangeWatch(const ExchangeWatch&) = delete;
  ExchangeWatch& operator=(const ExchangeWatch&) = delete;

  // Before an execute's first enqueue on `stream`: throws TIMEOUT (the communicator aborted) when the last
  // exchange is overdue, or the CUDA error it ended with; when `ordered`, makes `stream` wait for its end. Returns
  // whether `stream` is being captured (then nothing is queried or waited for), for after().
  bool before(cudaStream_t stream, bool ordered, const char* op);
  // What a TIMEOUT says of an exchange: "the exchange of <subject> has not ended ... : <missing>".
  struct Exchange {
    std::string subject;  // "plan 3 of group 0 (world ranks 0..3)"
    std::string missing;  // "a rank of world ranks 0..3 is not in it (another plan or operation, or none)"
  };
  // After an execute's last enqueue (also after a failed one, whose part may be enqueued): records its end, unless
  // captured. `what` is kept as a pointer copy, no allocation.
  void after(cudaStream_t stream, bool captured, const std::shared_ptr<const Exchange>& what);
  // TIMEOUT (the communicator aborted) or the CUDA error, with the message; else BASP_SUCCESS. Any thread.
  basp_status_t check(std::string& message);
  // A short wait (at most `ms`) for the last exchange to end; true when it has (or none is pending).
  bool wait_ms(int64_t ms);

 private:
  basp_status_t check_locked(std::string& message);

  std::shared_ptr<GroupComm> comm_;
  int64_t timeout_ms_;
  std::mutex mutex_;
  cudaEvent_t done_ = nullptr;
  bool pending_ = false;
  std::chrono::steady_clock::time_point since_;  // enqueue of the oldest exchange not known to have ended
  std::shared_ptr<const Exchange> last_;
};

}  // namespace basp::transport::nccl
