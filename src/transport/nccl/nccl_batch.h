// The NCCL backend's batch plans (docs/batch.md): the world-level resources a comm made with batch_capacity > 0
// prepares once at creation, and that every batch plan's executor then uses without talking to any rank:
//   - a world NCCL communicator (all the comm's ranks, connected to every peer at creation: nccl_backend.h);
//   - a device workspace pool, grown at batch plan creation, never at execute;
//   - the order of batch executes on the device (each waits for the previous one's end: one pool serves them all),
//     and what the tags of an exchange found (a peer on another batch plan: MISMATCH) or an exchange that has not
//     ended within the comm's timeout (TIMEOUT naming its group, the world communicator aborted: exchange_watch.h).
// An execute only enqueues, as every NCCL execute: a mismatch is found on the device, where the tag check keeps
// the unpacks from writing anything, and is reported by the next batch execute of the comm and by
// basp_comm_get_async_error.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "layout/cuda/pack_kernels.h"
#include "transport/nccl/exchange_watch.h"
#include "transport/nccl/nccl_bootstrap.h"
#include "transport/nccl/nccl_group_comm.h"
#include "transport/nccl/nccl_util.h"
#include "transport/transport.h"

namespace basp::transport::nccl {

// One batch plan's group, for the messages of the shared state (made at plan creation, never at execute).
struct BatchGroupInfo {
  int64_t batch_id = 0;
  std::string where;                                        // "batch group 2 (world ranks 4..6)"
  std::vector<int32_t> members;                             // world ranks by position
  std::shared_ptr<const ExchangeWatch::Exchange> exchange;  // what a TIMEOUT says of its exchanges
};

// The state the comm's batch executors share. Thread-safe; executes themselves are serialised (checked).
class BatchShared {
 public:
  // `world`: the communicator the comm's batch exchanges run on (aborted when one hangs: exchange_watch.h).
  BatchShared(std::shared_ptr<GroupComm> world, int64_t timeout_ms);
  // Waits for the last exchange to end (up to the timeout; past it the world communicator is aborted, so that the
  // hung exchange ends; with timeout 0, as long as it takes) before the pool and the report are released.
  ~BatchShared();
  BatchShared(const BatchShared&) = delete;
  BatchShared& operator=(const BatchShared&) = delete;

  int device() const { return device_; }
  // At batch plan creation: device memory of at least `bytes`, 256-byte aligned. A growing pool allocates a new
  // buffer (at least twice the last) and keeps the older ones (the plans made before, and CUDA graphs captured from
  // them, still use them) as long as the comm's batch state lives: with its last plan. So a plan's memory never
  // moves, and the pool holds at most about 4x its largest plan's need.
  std::byte* reserve(int64_t bytes);
  // The device's view of the tag report (layout/cuda/pack_kernels.h).
  layout::cuda::TagReport* report_device() const { return report_device_; }

  // Claims the comm's batch executes for one call (INVALID_ARGUMENT naming `op` when another thread holds them).
  void claim(const char* op);
  void release() { busy_.store(false, std::memory_order_release); }
  // Before an execute's first enqueue: fails with what an earlier exchange found (MISMATCH from its tags, TIMEOUT
  // when it is overdue); then, when `ordered`, makes `stream` wait for the end of the comm's previous batch exchange
  // (not while `stream` is being captured into a CUDA graph: a graph's batch executes must then be captured on one
  // stream, docs/batch.md). Returns whether `stream` is being captured, for after().
  bool before(cudaStream_t stream, bool ordered, const char* op);
  // After an exchange's last enqueue: its group, and (not while captured) its end, for the next execute and for
  // check().
  void after(cudaStream_t stream, bool captured, const std::shared_ptr<const BatchGroupInfo>& group);
  // MISMATCH or TIMEOUT with the message, as above; else BASP_SUCCESS.
  basp_status_t check(std::string& message);

 private:
  basp_status_t check_report(std::string& message);

  int device_;
  mutable std::mutex mutex_;
  std::vector<DeviceBuffer> buffers_;  // the newest last
  layout::cuda::TagReport* report_host_ = nullptr;
  layout::cuda::TagReport* report_device_ = nullptr;
  // The groups of the last few exchanges, to name the one a late report comes from (a report is read by the
  // next execute, so it belongs to one of the last two).
  std::array<std::shared_ptr<const BatchGroupInfo>, 4> recent_;
  size_t next_recent_ = 0;
  std::atomic<bool> busy_{false};
  std::unique_ptr<ExchangeWatch> watch_;  // the end and the deadline of the last exchange
};

class NcclBatchTransport final : public BatchTransport {
 public:
  // `world`: the comm's world communicator, already connected; `spec`: the world as one group (position = rank).
  NcclBatchTransport(std::shared_ptr<GroupComm> world, const GroupSpec& spec);
  std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const GroupInBatch& group) override;
  Bootstrap& world() override { return bootstrap_; }
  // Calibration's memory is device memory, its stream a private one; finish polls it against the comm's timeout.
  std::unique_ptr<Buffer> buffer(int64_t bytes) override;
  void* stream() override { return stream_; }
  void finish(void* stream) override;
  ~NcclBatchTransport() override;
  // The world communicator's asynchronous error, then the shared state's (BatchShared::check).
  basp_status_t async_error(std::string& message);
  void abort() { world_->abort(); }

 private:
  std::shared_ptr<GroupComm> world_;
  std::shared_ptr<BatchShared> shared_;
  NcclBootstrap bootstrap_;
  int64_t timeout_ms_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace basp::transport::nccl
