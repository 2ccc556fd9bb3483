// The object behind a basp_plan_t: one exchange of one comm, with its executor. Every per-call check of an
// execute lives here, once: the comm's health, the buffers (NULL, overlap, memory kind) and the stream.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "basp/basp.h"
#include "common/direction.h"
#include "plan/exchange.h"
#include "runtime/comm.h"
#include "runtime/progress.h"
#include "transport/transport.h"

namespace basp::runtime {

class Plan : public std::enable_shared_from_this<Plan> {
 public:
  // Collective over the rank's group. `desc` is NULL and `local_error` set when the caller's descriptor could not
  // be read; the rank still joins the group's consistency check (runtime/consistency.h), then throws.
  Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1* desc, const std::exception_ptr& local_error);
  // A batch plan (runtime/batch.h), made locally: its exchange and executor; THD: its group's stream of
  // `batch_tokens` tokens and the documents_fingerprint of its documents' boundaries, checked by the batch.
  Plan(std::shared_ptr<Comm> comm, plan::ExchangePlan exchange, std::unique_ptr<transport::PlanExecutor> executor,
       int64_t batch_tokens, uint64_t documents);
  bool batch() const { return batch_; }

  const plan::ExchangePlan& exchange() const { return exchange_; }
  const Comm& comm() const { return *comm_; }
  // The same comm, for a collective call over it that may mark it broken (Comm::collective).
  Comm& shared_comm() const { return *comm_; }
  const transport::PlanExecutor& executor() const { return *executor_; }
  // Throws BASP_ERROR_COMM_BROKEN when the plan's comm is broken.
  void check_usable() const { comm_->check_usable(); }

  // The token count basp_scatter/basp_gather pass: the plan's own (not allowed for THD).
  static constexpr int64_t kPlanTokens = INT64_MIN;
  // A scatter or gather of `tokens` tokens (basp_scatter_tokens; kPlanTokens from basp_scatter).
  void execute(Direction direction, int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) {
    execute(direction, tokens, plan::HeadChunk{}, inputs, outputs, stream);
  }
  // The same for head chunk `chunk` of the exchange (plan/head_chunks.h): what a started chunk runs on the MPI
  // backend (start below), and the tests' entry point. Every path of the MPI backend executes a chunk, blocking;
  // the NCCL backend enqueues it on `stream` (batch plans: BASP_ERROR_UNSUPPORTED). The chunks
  // of one gather run in order over the same head-sharded inputs, with no other exchange of the plan between them
  // (a head several ranks hold is summed in the chunk of its last contribution, from where the others landed). A
  // chunk outside the plan's bounds is a BASP_ERROR_INVALID_ARGUMENT of this rank's checks.
  void execute(Direction direction, int64_t tokens, plan::HeadChunk chunk, const void* const* inputs,
               void* const* outputs, void* stream);
  // Split-phase head chunks (basp_scatter_start, basp_scatter_test, basp_scatter_wait; docs/overlap.md; the
  // definitions in plan_chunks.cpp). start checks its arguments and the round's rules on the caller's thread (a
  // failure is told to the group, in order, as an execute's is), then queues the chunk on the comm's progress
  // thread and returns; test says whether it has run; wait blocks until it has, frees it and rethrows its error.
  // On a backend whose executor orders chunks on the device (transport::StreamChunks, NCCL) start enqueues the
  // chunk on the caller's thread instead, test queries the device and wait makes the start's stream wait for the
  // chunk: nothing blocks the host. The plan's first start makes its chunk slots (one per chunk and direction).
  void start(Direction direction, int32_t chunk, int32_t count, int64_t tokens, const void* const* inputs,
             void* const* outputs, void* stream);
  bool test(Direction direction, int32_t chunk);
  void wait(Direction direction, int32_t chunk);
  // basp_plan_destroy: waits for the chunks in flight up to the comm's timeout and throws the first error of a chunk
  // not waited for; past the timeout, takes those not yet begun out of the queue and throws BASP_ERROR_TIMEOUT (the
  // running one ends within its own deadline, the plan after it). Device-ordered chunks: waits for their events up
  // to the timeout, then aborts the communicator and throws BASP_ERROR_TIMEOUT (the comm broken).
  void drain();
  // basp_plan_set_documents: the document boundaries of the executes that follow (THD plans).
  void set_documents(const int64_t* cu_seqlens, int32_t num_docs);
  // basp_plan_query's answer.
  basp_plan_info_v1 info() const;

 private:
  // A head chunk started split-phase: its exchange as the progress thread runs it.
  class ChunkJob final : public Progress::Job {
   public:
    void run() override;
    Plan* plan = nullptr;
    Direction direction = Direction::kScatter;
    plan::CallGeometry call;
    std::array<const void*, BASP_MAX_TENSORS> inputs{};
    std::array<void*, BASP_MAX_TENSORS> outputs{};
    bool in_use = false;  // started and not yet waited for (the caller's thread only)
  };
  // One direction's chunks: a round is `count` chunks, open from its first start until each has been started.
  struct ChunkRound {
    std::vector<ChunkJob> jobs;  // by chunk index, max_head_chunks of them once the first start made them
    int32_t count = 0;           // the open round's C (0: none open)
    int32_t started = 0;         // chunks of the open round started so far
    std::vector<bool> begun;     // by chunk index: started in the open round
  };
  ChunkRound& round(Direction direction) { return rounds_[direction == Direction::kScatter ? 0 : 1]; }
  void check_start(Direction direction, plan::HeadChunk chunk);
  void check_no_chunks(Direction direction);
  void check_batch_gather(Direction direction) const;
  ChunkJob& started_job(Direction direction, int32_t chunk);
  // Runs `step`, an exchange or a failed-checks report, in the comm's queue order (runtime/progress.h).
  template <typename Step>
  void in_order(Step&& step) {
    comm_->progress().in_order([&] { comm_->collective(step); });
  }
  void confirm_made(const std::exception_ptr& unmade);
  int64_t call_tokens(Direction direction, int64_t tokens) const;
  void check_documents(Direction direction, int64_t call) const;
  void check_buffers(Direction direction, const plan::CallGeometry& call, const void* const* inputs,
                     void* const* outputs, void* stream);
  void check_memory_kinds(Direction direction, const void* const* inputs, void* const* outputs);

  std::shared_ptr<Comm> comm_;
  plan::ExchangePlan exchange_;
  std::unique_ptr<transport::PlanExecutor> executor_;
  bool check_pointers_ = true;
  // The last set of pointers whose memory kind passed (inputs, then outputs); executes of one plan never run
  // concurrently, so no lock guards it.
  std::array<const void*, 2 * BASP_MAX_TENSORS> checked_{};
  bool checked_valid_ = false;
  int64_t documents_tokens_ = -1;  // the last entry of the boundaries set, -1: none
  bool batch_ = false;
  int64_t batch_tokens_ = -1;         // a THD batch plan's stream
  std::array<ChunkRound, 2> rounds_;  // scatter, gather
  bool split_checked_ = false;        // the backend's split-phase support, checked at the first start
};

// The fingerprint of document boundaries cu_seqlens[0..num_docs] an executor matches (never 0: 0 is none).
uint64_t documents_fingerprint(const int64_t* cu_seqlens, int32_t num_docs);

}  // namespace basp::runtime
