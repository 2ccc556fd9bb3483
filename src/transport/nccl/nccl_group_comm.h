// One rank's NCCL communicator of its group, shared by the group transport and by every plan made from it (plans
// outlive the comm handle). Released with the last owner: ncclCommDestroy, or ncclCommAbort when NCCL reports an
// asynchronous error or a host-side collective failed (NCCL requires it), or nothing when abort() already ran.
#pragma once

#include <nccl.h>

#include <atomic>
#include <mutex>
#include <string>

#include "basp/basp.h"
#include "common/deadline.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

class GroupComm {
 public:
  GroupComm(ncclComm_t comm, int device);
  ~GroupComm();
  GroupComm(const GroupComm&) = delete;
  GroupComm& operator=(const GroupComm&) = delete;

  // The communicator for an enqueue; BASP_ERROR_NCCL once the comm was aborted.
  ncclComm_t get(const char* op) const;
  int device() const { return device_; }
  basp_status_t async_error(std::string& message);
  // ncclCommAbort, once; later calls do nothing.
  void abort();
  // Something enqueued on the communicator may never finish (a batch exchange past its timeout): released with
  // ncclCommAbort, not ncclCommDestroy, which would wait for it.
  void mark_errored() { errored_.store(true); }
  // A host-side all-gather over the group (collective_to_host). Any failure (a timeout leaves the collective
  // enqueued) makes the communicator aborted, not destroyed, when released.
  void allgather(const void* send, size_t bytes, void* recv, const std::string& step, const std::string& where,
                 const detail::Deadline& deadline);
  // The same for a uniform all-to-all of `bytes_per_peer` bytes per peer (send and recv: size * bytes_per_peer).
  void alltoall(const void* send, size_t bytes_per_peer, void* recv, const std::string& step, const std::string& where,
                const detail::Deadline& deadline);

 private:
  void collective(const HostCollective& op, const std::string& step, const std::string& where,
                  const detail::Deadline& deadline);

  ncclComm_t comm_;
  int device_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> errored_{false};  // async_error() found an error, or a host-side collective failed
  std::mutex abort_mutex_;
};

}  // namespace basp::transport::nccl
