// The NCCL backend: device memory, one NCCL communicator per group.
//
// A plan owns two device buffers laid out as layout::PackedWorkspace (send and receive). An exchange is three
// operations enqueued on the caller's stream, nothing else: one pack launch for all tensors, one ncclAlltoAll of
// peer_stride bytes per peer, one unpack launch. No host synchronisation, no allocation, no communicator
// creation, so an execute can be captured in a CUDA graph. With K = 1 the sequence-sharded and head-sharded
// tensors are the same bytes and an execute is one device-to-device copy per tensor, with no NCCL call.
#pragma once

#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "common/deadline.h"
#include "plan/exchange.h"
#include "runtime/comm.h"
#include "transport/nccl/nccl_util.h"
#include "transport/transport.h"

namespace basp::transport::nccl {

// One rank's communicator of its group, shared by the transport and by every plan made from it (plans outlive
// the comm handle). Released with the last owner: ncclCommDestroy, or ncclCommAbort when NCCL reports an
// asynchronous error or a host-side collective failed (NCCL requires it), or nothing when abort() already ran.
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
  // A host-side all-gather over the group (collective_to_host). Any failure (a timeout leaves the collective
  // enqueued) makes the communicator aborted, not destroyed, when released.
  void allgather(const void* send, size_t bytes, void* recv, const std::string& step, const std::string& where,
                 const detail::Deadline& deadline);
  // The same for a uniform all-to-all of `bytes_per_peer` bytes per peer (send and recv: size * bytes_per_peer).
  void alltoall(const void* send, size_t bytes_per_peer, void* recv, const std::string& step, const std::string& where,
                const detail::Deadline& deadline);

 private:
  ncclComm_t comm_;
  int device_;
  void collective(const HostCollective& op, const std::string& step, const std::string& where,
                  const detail::Deadline& deadline);

  std::atomic<bool> aborted_{false};
  std::atomic<bool> errored_{false};  // async_error() found an error, or a host-side collective failed
  std::mutex abort_mutex_;
};

struct ExecutorOptions {
  // K = 1: copy tensor to tensor instead of pack -> ncclAlltoAll -> unpack. The tests turn it off to drive the
  // whole exchange path through NCCL on a single GPU.
  bool direct_copy_when_alone = true;
};

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options = {});

// Who the group is, for the consistency check and its messages.
struct GroupContext {
  std::vector<int32_t> members;  // world rank of each position
  int32_t position = 0;          // this rank's position in the group
  std::string where;             // "group 0 (world ranks 0..3)"
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;
};

class NcclGroupTransport final : public GroupTransport {
 public:
  NcclGroupTransport(std::shared_ptr<GroupComm> group, GroupContext context)
      : group_(std::move(group)), context_(std::move(context)) {}
  basp_backend_t backend() const override { return BASP_BACKEND_NCCL; }
  // The consistency check of every collective call (docs/reliability.md) over the group communicator: one
  // ncclAllGather of 8-byte fingerprints, and only when they differ one of the call records
  // (runtime::agree_by_allgather), each waited for until the comm's timeout.
  void agree(const runtime::CallRecord& mine) override;
  // Collective over the group, once, at comm creation: NCCL connects peers lazily, inside the first collective
  // that needs a connection, and that wait has no timeout; so the group communicator is connected while every
  // rank is known to be inside comm creation: a one-byte all-gather of the positions (the connections of the
  // checks) and a one-byte-per-peer all-to-all (those of the exchange), both checked for what they deliver.
  void connect(const detail::Deadline& deadline);
  std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan) override;
  // An asynchronous NCCL error leaves the communicator unusable (NCCL requires an abort): the comm is marked
  // broken, like an MPI failure, so later calls fail at once with BASP_ERROR_COMM_BROKEN naming it.
  basp_status_t async_error(std::string& message) override;
  // ncclCommAbort, then the comm is broken: later calls on it and its plans return BASP_ERROR_COMM_BROKEN.
  void abort() override;
  const std::shared_ptr<GroupComm>& group() const { return group_; }

 private:
  std::shared_ptr<GroupComm> group_;
  GroupContext context_;
};

// Collective over `parent`: forms the groups (runtime::plan_groups) and splits `parent` into one communicator
// per group with ncclCommSplit (color = group, key = position). No operation may be outstanding on `parent`.
std::shared_ptr<runtime::Comm> create_comm(ncclComm_t parent, const runtime::CommOptions& options);

// Wraps a group communicator that already exists (the MPI bootstrap creates one per group). Makes no NCCL call
// but ncclCommCount/ncclCommUserRank; the creators then call NcclGroupTransport::connect (connect_group).
std::shared_ptr<runtime::Comm> make_comm(plan::GroupLayout layout, int32_t rank, basp_placement_t placement,
                                         int64_t timeout_ms, ncclComm_t group, int device);

// NcclGroupTransport::connect of a comm made by make_comm.
void connect_group(runtime::Comm& comm, const detail::Deadline& deadline);

}  // namespace basp::transport::nccl
