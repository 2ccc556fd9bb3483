// The NCCL backend's plan executor: device memory, the plan's path fixed at creation, like the MPI backend's.
//   local  K = 1: the two layouts of a tensor are the same bytes: one device-to-device copy per tensor.
//   nccl   one pack launch for all tensors, one ncclAlltoAll of peer_stride bytes per peer between two device
//          buffers laid out as layout::PackedWorkspace, one unpack launch (the textbook shape); any other shape:
//          grouped ncclSend/ncclRecv of each (tensor, peer) chunk, and the summing unpack of replicated heads.
// An execute only enqueues on the caller's stream: no host synchronisation, no allocation, no communicator
// creation, no control round, so it can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "plan/exchange.h"
#include "transport/nccl/nccl_group_comm.h"
#include "transport/transport.h"

namespace basp::transport::nccl {

class ExchangeWatch;

struct ExecutorOptions {
  // K = 1: the local path instead of pack -> ncclAlltoAll -> unpack. The tests turn it off to drive the whole
  // exchange path through NCCL on a single GPU.
  bool local_copy_when_alone = true;
  // BASP_CHECK_EXCHANGES=1 at plan creation (debugging): before moving data, every execute of the group agrees on
  // plan, operation, token count and document boundaries in a host-side all-gather; a disagreement is MISMATCH
  // naming both sides. Not while the stream is captured.
  bool check_exchanges = false;
  int64_t plan_id = 0;  // creation order in the comm (PlanContext), for the check and messages
  std::string where;    // the group, for messages
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;
  // The deadline of the group communicator's exchanges (exchange_watch.h), shared by its plans; none: no deadline.
  std::shared_ptr<ExchangeWatch> watch;
};

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options = {});

class BatchShared;
// A batch plan's executor (nccl_batch.h): not collective, no communicator made; its workspace from `shared`'s pool.
std::unique_ptr<PlanExecutor> make_batch_executor(std::shared_ptr<GroupComm> world, std::shared_ptr<BatchShared> shared,
                                                  const plan::ExchangePlan& plan, const GroupInBatch& group);

}  // namespace basp::transport::nccl
