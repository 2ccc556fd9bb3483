// Whether a comm can still be used (docs/reliability.md). A timeout or a backend failure in the middle of a
// collective step leaves the ranks of a group out of step: some may have finished the step, others not, and
// neither MPI nor NCCL can take back what was posted. So the comm is marked broken, and every later call on it or on
// its plans fails at once with BASP_ERROR_COMM_BROKEN, naming the first failure, instead of waiting for peers that will
// never match it. Destroying still works. Thread-safe: any thread may mark or check.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "basp/basp.h"
#include "common/error.h"
#include "common/status_name.h"

namespace basp::runtime {

class Health {
 public:
  bool broken() const { return broken_.load(std::memory_order_acquire); }

  // Records the first failure; later ones keep it.
  void mark_broken(basp_status_t cause, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.load(std::memory_order_relaxed)) return;
    cause_ = cause;
    message_ = message;
    broken_.store(true, std::memory_order_release);
  }

  // Throws BASP_ERROR_COMM_BROKEN naming the first failure, when there was one.
  void check() const {
    if (!broken()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    detail::fail(BASP_ERROR_COMM_BROKEN, "the comm is broken since an earlier call failed (",
                 detail::status_name(cause_), ": ", message_, "); destroy its plans and the comm");
  }

  // BASP_SUCCESS while healthy, else the status of the first failure, with its message.
  basp_status_t cause(std::string& message) const {
    if (!broken()) return BASP_SUCCESS;
    std::lock_guard<std::mutex> lock(mutex_);
    message = message_;
    return cause_;
  }

 private:
  std::atomic<bool> broken_{false};
  mutable std::mutex mutex_;
  basp_status_t cause_ = BASP_SUCCESS;
  std::string message_;
};

// Failures that leave a group out of step: a timeout, a failed MPI, NCCL or CUDA call in a collective step, and an
// internal error (a bug: nothing says the ranks are still in step). Argument errors and mismatches are found by every
// rank alike, before anything is posted, and leave the comm usable.
constexpr bool breaks_comm(basp_status_t status) {
  return status == BASP_ERROR_TIMEOUT || status == BASP_ERROR_MPI || status == BASP_ERROR_NCCL ||
         status == BASP_ERROR_CUDA || status == BASP_ERROR_COMM_BROKEN || status == BASP_ERROR_INTERNAL;
}

}  // namespace basp::runtime
