#include "transport/nccl/exchange_watch.h"

#include <thread>
#include <utility>

#include "common/error.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

WatchVerdict watch_verdict(bool pending, cudaError_t event_state, int64_t waited_ms, int64_t timeout_ms) {
  if (!pending) return WatchVerdict::kIdle;
  if (event_state == cudaSuccess) return WatchVerdict::kEnded;
  if (event_state != cudaErrorNotReady) return WatchVerdict::kFailed;
  return timeout_ms > 0 && waited_ms > timeout_ms ? WatchVerdict::kOverdue : WatchVerdict::kRunning;
}

namespace {

int64_t since_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

ExchangeWatch::ExchangeWatch(std::shared_ptr<GroupComm> comm, int64_t timeout_ms)
    : comm_(std::move(comm)), timeout_ms_(timeout_ms) {
  DeviceScope scope(comm_->device());
  BASP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

ExchangeWatch::~ExchangeWatch() {
  DeviceScope scope(comm_->device());
  if (pending_) {
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      const WatchVerdict v = watch_verdict(true, state, since_ms(since_), timeout_ms_);
      if (v == WatchVerdict::kOverdue) {
        // Hung: ncclCommAbort ends its kernels; then the event completes.
        try {
          comm_->abort();
        } catch (const detail::Error&) {
        }
        cudaEventSynchronize(done_);
        break;
      }
      if (v != WatchVerdict::kRunning) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cudaGetLastError();
  }
  cudaEventDestroy(done_);
}

bool ExchangeWatch::before(cudaStream_t stream, bool ordered, const char* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  // While `stream` is captured the event is neither queried nor waited for (a query of work outside the capture
  // may invalidate it).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BASP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool captured = capture != cudaStreamCaptureStatusNone;
  if (captured) return true;
  std::string message;
  const basp_status_t found = check_locked(message);
  if (found != BASP_SUCCESS) detail::fail(found, op, ": ", message);
  if (ordered && pending_) BASP_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
  return false;
}

void ExchangeWatch::after(cudaStream_t stream, bool captured, const std::shared_ptr<const Exchange>& what) {
  if (captured) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // NCCL runs a communicator's operations in the order they were enqueued: while an older exchange has not ended,
  // the deadline still counts from its enqueue.
  const bool older_running = pending_ && cudaEventQuery(done_) == cudaErrorNotReady;
  cudaGetLastError();
  BASP_CUDA_CHECK(cudaEventRecord(done_, stream));
  if (!older_running) {
    since_ = std::chrono::steady_clock::now();
    last_ = what;  // a shared_ptr copy: no allocation
  }
  pending_ = true;
}

basp_status_t ExchangeWatch::check(std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  return check_locked(message);
}

bool ExchangeWatch::wait_ms(int64_t ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!pending_ || cudaEventQuery(done_) != cudaErrorNotReady) return true;
    }
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

basp_status_t ExchangeWatch::check_locked(std::string& message) {
  const cudaError_t state = pending_ ? cudaEventQuery(done_) : cudaSuccess;
  const int64_t waited = pending_ ? since_ms(since_) : 0;
  switch (watch_verdict(pending_, state, waited, timeout_ms_)) {
    case WatchVerdict::kIdle:
    case WatchVerdict::kRunning: return BASP_SUCCESS;
    case WatchVerdict::kEnded: pending_ = false; return BASP_SUCCESS;
    case WatchVerdict::kFailed:
      cudaGetLastError();
      message = std::string("the last exchange failed on the device: ") + cudaGetErrorString(state);
      return BASP_ERROR_CUDA;
    case WatchVerdict::kOverdue: break;
  }
  message = "the exchange of " + (last_ ? last_->subject : std::string("the last plan")) + " has not ended " +
            std::to_string(waited) + " ms after it was enqueued (the comm's timeout is " + std::to_string(timeout_ms_) +
            " ms): " + (last_ ? last_->missing : std::string("a rank of its group is not in it")) +
            "; the communicator was aborted, which ended it: destroy the comm's plans and the comm";
  try {
    comm_->abort();  // ends the hung kernels; the comm's later calls fail
  } catch (const detail::Error& e) {
    message += std::string(" (the abort itself failed: ") + e.what() + ")";
  }
  return BASP_ERROR_TIMEOUT;
}

}  // namespace basp::transport::nccl
