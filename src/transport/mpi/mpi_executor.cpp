#include "transport/mpi/mpi_executor.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/trace.h"
#include "transport/executor_base.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "an unknown level";
  }
}

// Host memory, no stream: an execute blocks until its exchange is done.
constexpr ExecuteNeeds kNeeds{false, false, "MPI"};

// Positions 0..k-1 as ranks 0..k-1: a plan's messages travel on its group's own communicators.
std::vector<int32_t> identity(int32_t k) {
  std::vector<int32_t> out(static_cast<size_t>(k));
  for (int32_t j = 0; j < k; ++j) out[static_cast<size_t>(j)] = j;
  return out;
}

// What an MPI executor is made of, a plan's and a batch plan's alike.
struct ExecutorParts {
  ControlChannel* channel = nullptr;     // carries its control messages
  GroupSpec group;                       // its group: world ranks by position, the timeout, for messages
  std::vector<int32_t> ranks;            // position -> rank on the channel's and the data communicators
  MatchPolicy match;                     // plan tag, or batch fingerprint
  DirectionWorkspaces workspaces;        // the plan's own, or the comm's pool (one per direction)
  std::shared_ptr<SharedMemory> memory;  // the group's basp_mem_alloc memory (none for a batch plan)
  std::atomic<bool>* busy = nullptr;     // the comm's flag that serialises its batch plans' executes (batch only)
};

class MpiExecutor final : public ExecutorBase<ExchangePath> {
 public:
  MpiExecutor(const plan::ExchangePlan& plan, ExecutorParts parts)
      : ExecutorBase(plan, kNeeds),
        group_(std::move(parts.group)),
        control_(*parts.channel, group_, parts.ranks, parts.match),
        timeout_ms_(group_.timeout_ms),
        busy_(parts.busy) {
    context_.plan = &plan_;
    context_.control = &control_;
    context_.group = &group_;
    context_.memory = std::move(parts.memory);
    context_.ranks = std::move(parts.ranks);
    context_.workspaces = std::move(parts.workspaces);
  }

  const PathContext& path_context() const { return context_; }
  void set_path(std::unique_ptr<ExchangePath> path) { path_ = std::move(path); }

  void execute(Direction direction, const plan::CallGeometry& call, const void* const* inputs, void* const* outputs,
               void*) override {
    run(direction, call, inputs, outputs);
  }
  void set_documents(uint64_t fingerprint) override { documents_ = fingerprint; }
  // The progress thread makes MPI calls while the caller's thread may make others.
  void check_split_phase() const override {
    int provided = MPI_THREAD_SINGLE;
    BASP_MPI_CHECK(MPI_Query_thread(&provided));
    BASP_CHECK(
        provided == MPI_THREAD_MULTIPLE, BASP_ERROR_UNSUPPORTED,
        "split-phase head chunks run their exchanges on the comm's progress thread, which needs MPI_Init_thread ",
        "with MPI_THREAD_MULTIPLE; MPI provides ", thread_level_name(provided));
  }

  [[noreturn]] void fail(Direction direction, int64_t tokens, plan::HeadChunk chunk,
                         const std::exception_ptr& own) override {
    if (plan_.group_size == 1) std::rethrow_exception(own);
    const Serial serial(busy_);
    const detail::Deadline deadline(timeout_ms_);
    control_.begin(direction, tokens, chunk, documents_);
    try {
      // The peers report BASP_ERROR_MISMATCH naming this rank; the exchange did not happen on any rank.
      control_.arrive_failed(detail::status_of(own), deadline,
                             direction == Direction::kScatter
                                 ? "the arrival of the group's ranks at basp_scatter (this rank's checks failed)"
                                 : "the arrival of the group's ranks at basp_gather (this rank's checks failed)");
    } catch (...) {
      set_last_rounds(control_.rounds());
      control_.end();
      throw;
    }
    control_.rollback();
    set_last_rounds(control_.rounds());
    control_.end();
    std::rethrow_exception(own);
  }

 private:
  // Executes of one comm's batch plans run one at a time: they share one tag and the pool's workspaces.
  class Serial {
   public:
    explicit Serial(std::atomic<bool>* busy) : busy_(busy) {
      bool expected = false;
      BASP_CHECK_ARG(busy_ == nullptr || busy_->compare_exchange_strong(expected, true, std::memory_order_acq_rel),
                     "another batch plan of this comm is executing on another thread: the batch plans of one comm "
                     "execute one at a time");
    }
    ~Serial() {
      if (busy_ != nullptr) busy_->store(false, std::memory_order_release);
    }
    Serial(const Serial&) = delete;
    Serial& operator=(const Serial&) = delete;

   private:
    std::atomic<bool>* busy_;
  };

  void run(Direction direction, const plan::CallGeometry& call, const void* const* inputs, void* const* outputs) {
    const detail::TraceRange range(direction == Direction::kScatter ? "basp:scatter" : "basp:gather");
    const Serial serial(busy_);
    const detail::Deadline deadline(timeout_ms_);
    if (!call.chunk.whole()) check_chunk(direction, call);
    const Exchange x{direction, call, call.tensors.data(), inputs, outputs, deadline};
    control_.begin(direction, call.tokens, call.chunk, documents_);
    try {
      set_last_path(path_->run(x));
    } catch (const detail::Error& e) {
      // A mismatched exchange did not happen, on any rank: its call number is taken back everywhere.
      if (e.status() == BASP_ERROR_MISMATCH) control_.rollback();
      set_last_rounds(control_.rounds());
      control_.end();
      throw;
    } catch (...) {
      control_.end();
      throw;
    }
    set_last_rounds(control_.rounds());
    control_.end();
  }

  // What a head chunk's execute needs beyond a whole one's; the same verdict on every rank of the group.
  void check_chunk(Direction direction, const plan::CallGeometry& call) const {
    const char* op = direction_call(direction);
    BASP_CHECK(call.direction == direction, BASP_ERROR_INTERNAL, op, ": head chunk ", call.chunk.index, " of ",
               call.chunk.count, " derived for the other direction");
  }

  GroupSpec group_;  // world ranks by position, for messages
  PlanControl control_;
  PathContext context_;
  int64_t timeout_ms_;
  uint64_t documents_ = 0;             // set between executes (runtime::Plan), never during one
  std::atomic<bool>* busy_ = nullptr;  // batch plans: the comm's "a batch plan executes" flag
};

}  // namespace

std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const GroupInBatch& batch,
                                                  const BatchLocality& locality, NodeStaging& staging,
                                                  ControlChannel& world, MPI_Comm data, const DirectionWorkspaces& pool,
                                                  std::atomic<bool>& busy) {
  ExecutorParts parts;
  parts.channel = &world;
  parts.group = batch.group;
  parts.ranks = batch.group.members;  // world ranks, the world channel's and the data communicator's
  parts.match = MatchPolicy::batch_fingerprint(batch);
  parts.workspaces = pool;
  parts.busy = &busy;
  auto executor = std::make_unique<MpiExecutor>(plan, std::move(parts));
  // Chosen locally: every rank of the group derives the same group, plan and locality from the same membership.
  const std::vector<int32_t>& members = batch.group.members;
  const std::unique_ptr<PathSource> source = batch_path_source(locality, staging, members, data);
  executor->set_path(
      choose_path(batch_path_facts(plan, locality, staging, members), executor->path_context(), *source));
  return executor;
}

std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context,
                                            const CollectiveScope& group, ControlChannel& channel,
                                            std::shared_ptr<SharedMemory> memory) {
  ExecutorParts parts;
  parts.channel = &channel;
  parts.group = channel.group();
  parts.ranks = identity(plan.group_size);
  parts.match = MatchPolicy::plan_tag(context.plan_id);
  parts.workspaces = DirectionWorkspaces::one(std::make_shared<Workspace>("workspace"));
  parts.memory = std::move(memory);
  auto executor = std::make_unique<MpiExecutor>(plan, std::move(parts));
  const detail::Deadline deadline(channel.group().timeout_ms);
  const PathFacts facts = plan_path_facts(plan, group, channel.group().where, deadline);
  const std::unique_ptr<PathSource> source = plan_path_source(plan, group, deadline);
  executor->set_path(choose_path(facts, executor->path_context(), *source));
  return executor;
}

}  // namespace basp::transport::mpi
