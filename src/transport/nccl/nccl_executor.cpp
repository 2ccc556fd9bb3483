#include "transport/nccl/nccl_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"
#include "common/fnv.h"
#include "common/rank_list.h"
#include "common/trace.h"
#include "layout/cuda/pack_kernels.h"
#include "plan/head_chunks.h"
#include "transport/executor_base.h"
#include "transport/nccl/chunk_streams.h"
#include "transport/nccl/exchange_watch.h"
#include "transport/nccl/nccl_batch.h"
#include "transport/nccl/nccl_paths.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {
namespace {

using paths::AllToAllPath;
using paths::BatchWiring;
using paths::DevicePath;
using paths::GeneralPath;
using paths::LocalCopyPath;

// What the ranks of a group compare when BASP_CHECK_EXCHANGES=1: the same on every rank for one exchange.
struct ExchangeCall {
  int64_t plan_id = 0;
  uint64_t plan = 0;      // fingerprint of the plan's geometry
  int64_t direction = 0;  // a Direction value
  int64_t tokens = 0;
  int32_t chunk_index = 0;  // the head chunk (plan::HeadChunk)
  int32_t chunk_count = 1;
  uint64_t documents = 0;
  bool operator==(const ExchangeCall& o) const {
    return plan_id == o.plan_id && plan == o.plan && direction == o.direction && tokens == o.tokens &&
           chunk_index == o.chunk_index && chunk_count == o.chunk_count && documents == o.documents;
  }
};

std::string describe(const ExchangeCall& c) {
  return std::string(direction_call(static_cast<Direction>(c.direction))) + " of plan " + std::to_string(c.plan_id) +
         " (fingerprint " + std::to_string(c.plan) + ") of " + std::to_string(c.tokens) + " tokens" +
         (c.chunk_count != 1
              ? " of head chunk " + std::to_string(c.chunk_index) + " of " + std::to_string(c.chunk_count)
              : std::string()) +
         (c.documents != 0 ? " with document boundaries " + std::to_string(c.documents) : std::string());
}

// One execute of `path` in `direction`.
void enqueue_exchange(DevicePath& path, Direction direction, const plan::CallGeometry& call, const void* const* inputs,
                      void* const* outputs, ncclComm_t comm, cudaStream_t stream) {
  if (direction == Direction::kScatter) {
    path.scatter(call, inputs, outputs, comm, stream);
  } else {
    path.gather(call, inputs, outputs, comm, stream);
  }
}

// Device memory, enqueued on the caller's stream.
constexpr ExecuteNeeds kNeeds{true, true, "NCCL"};

uint64_t plan_fingerprint(const plan::ExchangePlan& plan) {
  detail::Fnv1a f;
  f.add(plan.spec.layout);
  f.add(plan.spec.dtype);
  f.add(plan.group_size);
  for (const layout::Geometry& g : plan.tensors) {
    f.add(g.b_loc);
    f.add(g.seq_len);
    f.add(g.heads);
    f.add(g.split_heads);
    f.add(g.head_dim);
    f.add(g.elem);
  }
  return f.value();
}

// Executes whole exchanges and head chunks alike on the caller's stream; split-phase chunks (StreamChunks) on the
// plan's side stream (chunk_streams.h).
class NcclExecutor final : public ExecutorBase<DevicePath>, public StreamChunks {
 public:
  NcclExecutor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan, ExecutorOptions options)
      : ExecutorBase(plan, kNeeds), comm_(std::move(comm)) {
    {
      DeviceScope scope(comm_->device());
      chunks_ = std::make_unique<ChunkStreams>(plan::max_head_chunks(plan_));
    }
    if (options.local_copy_when_alone && plan_.group_size == 1) {
      path_ = std::make_unique<LocalCopyPath>(plan_);
    } else {
      // The textbook shape (every chunk the same size): one ncclAlltoAll; any other: grouped send/recv.
      bool uniform = !plan_.spec.thd();
      for (const layout::Geometry& g : plan_.tensors) uniform = uniform && g.uniform();
      if (uniform) {
        path_ = std::make_unique<AllToAllPath>(plan_, comm_->device());
      } else {
        path_ = std::make_unique<GeneralPath>(plan_, comm_->device());
      }
      watch_ = std::move(options.watch);  // a local copy cannot hang
    }
    check_ = options.check_exchanges && plan_.group_size > 1;
    where_ = options.where;
    timeout_ms_ = options.timeout_ms;
    call_.plan_id = options.plan_id;
    call_.plan = plan_fingerprint(plan_);
    auto exchange = std::make_shared<ExchangeWatch::Exchange>();
    exchange->subject = "plan " + std::to_string(options.plan_id) + " of " + where_;
    exchange->missing = "a rank of " + where_ + " is not in it (another plan or operation, or none)";
    exchange_ = std::move(exchange);
  }

  // The chunk streams are released on the comm's device (without throwing: DeviceScope may).
  ~NcclExecutor() override {
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != comm_->device() &&
                          cudaSetDevice(comm_->device()) == cudaSuccess;
    chunks_.reset();
    if (switched) cudaSetDevice(previous);
    cudaGetLastError();
  }

  void execute(Direction direction, const plan::CallGeometry& call, const void* const* inputs, void* const* outputs,
               void* stream) override {
    run(
        direction, call,
        [&](ncclComm_t comm, cudaStream_t s) { enqueue_exchange(*path_, direction, call, inputs, outputs, comm, s); },
        stream);
  }
  void set_documents(uint64_t fingerprint) override { call_.documents = fingerprint; }

  // Split-phase head chunks, ordered by the device: nothing runs on the progress thread.
  void check_split_phase() const override {}
  StreamChunks* stream_chunks() override { return this; }
  void start(Direction direction, const plan::CallGeometry& call, const void* const* inputs, void* const* outputs,
             void* stream) override {
    const auto caller = static_cast<cudaStream_t>(stream);
    DeviceScope scope(comm_->device());
    const cudaStream_t side = chunks_->begin(caller);
    try {
      execute(direction, call, inputs, outputs, side);
    } catch (...) {
      chunks_->rejoin(caller);  // a capture the start forked into stays joined: its error is then this one
      throw;
    }
    chunks_->end(direction, call.chunk.index, caller);
  }
  bool test(Direction direction, int32_t chunk) override {
    DeviceScope scope(comm_->device());
    return chunks_->test(direction, chunk);
  }
  void wait(Direction direction, int32_t chunk) override {
    DeviceScope scope(comm_->device());
    chunks_->wait(direction, chunk);
  }
  bool drain(const detail::Deadline& deadline) override {
    DeviceScope scope(comm_->device());
    if (chunks_->drain(deadline)) return true;
    try {
      comm_->abort();  // ends the chunks' kernels
    } catch (const detail::Error&) {
    }
    return false;
  }

 private:
  // The deadline (exchange_watch.h) around the enqueue, and the agreement of BASP_CHECK_EXCHANGES before it.
  template <typename F>
  void run(Direction direction, const plan::CallGeometry& call, F&& enqueue, void* stream) {
    const char* op = direction_call(direction);
    const detail::TraceRange range(direction == Direction::kScatter ? "basp:scatter" : "basp:gather");
    ncclComm_t comm = comm_->get(op);
    const auto s = static_cast<cudaStream_t>(stream);
    DeviceScope scope(comm_->device());
    const bool captured = watch_ ? watch_->before(s, /*ordered=*/false, op) : false;
    if (check_ && !captured) agree(direction, call);
    try {
      enqueue(comm, s);
    } catch (const detail::Error&) {
      if (watch_) watch_->after(s, captured, exchange_);  // part of it may be enqueued
      throw;
    }
    if (watch_) watch_->after(s, captured, exchange_);
    set_last_path(path_->id());
  }

  // BASP_CHECK_EXCHANGES=1: a host-side all-gather of every rank's call before anything is enqueued. Blocks the
  // calling thread until the group's ranks arrive (up to the comm's timeout).
  void agree(Direction direction, const plan::CallGeometry& call) {
    const char* op = direction_call(direction);
    ExchangeCall mine = call_;
    mine.direction = static_cast<int64_t>(direction);
    mine.tokens = call.tokens;
    mine.chunk_index = call.chunk.index;
    mine.chunk_count = call.chunk.count;
    const auto k = static_cast<size_t>(plan_.group_size);
    std::vector<ExchangeCall> all(k);
    comm_->allgather(&mine, sizeof mine, all.data(), std::string("the exchange check of ") + op, where_,
                     detail::Deadline(timeout_ms_));
    for (size_t j = 0; j < k; ++j) {
      if (all[j] == mine) continue;
      detail::fail(BASP_ERROR_MISMATCH, op, ": the ranks of ", where_, " are not in the same exchange: position ", j,
                   " called ", describe(all[j]), ", this rank (position ", plan_.position, ") ", describe(mine),
                   "; BASP_CHECK_EXCHANGES=1 found it");
    }
  }

  std::shared_ptr<GroupComm> comm_;
  std::unique_ptr<ChunkStreams> chunks_;
  std::shared_ptr<ExchangeWatch> watch_;
  std::shared_ptr<const ExchangeWatch::Exchange> exchange_;
  bool check_ = false;
  ExchangeCall call_;
  std::string where_;
  int64_t timeout_ms_ = BASP_DEFAULT_TIMEOUT_MS;
};

// A batch plan's executor (nccl_batch.h): the local copy for a group of one, else the general path over the
// world communicator, wired to the comm's pool; every execute claims the comm's batch executes, fails with what an
// earlier exchange found, and orders itself after the previous one on the device.
class NcclBatchExecutor final : public ExecutorBase<DevicePath> {
 public:
  NcclBatchExecutor(std::shared_ptr<GroupComm> world, std::shared_ptr<BatchShared> shared,
                    const plan::ExchangePlan& plan, const GroupInBatch& group)
      : ExecutorBase(plan, kNeeds), world_(std::move(world)), shared_(std::move(shared)) {
    auto info = std::make_shared<BatchGroupInfo>();
    info->batch_id = group.batch_id;
    info->where = group.group.where;
    info->members = group.group.members;
    auto exchange = std::make_shared<ExchangeWatch::Exchange>();
    exchange->subject = group.group.where;
    exchange->missing = "a rank of world ranks " + detail::compress_ranks(group.group.members) +
                        " is not in it (another batch plan, or none)";
    info->exchange = std::move(exchange);
    group_ = std::move(info);
    if (plan_.group_size == 1) {
      path_ = std::make_unique<LocalCopyPath>(plan_);
      return;
    }
    BatchWiring w;
    w.peers = group.group.members;
    w.pool = shared_->reserve(GeneralPath::pool_bytes(plan_));
    w.report = shared_->report_device();
    tag_.fingerprint = group.fingerprint;
    tag_.batch_id = group.batch_id;
    w.tag = tag_;
    auto general = std::make_unique<GeneralPath>(plan_, shared_->device(), &w);
    general_ = general.get();
    path_ = std::move(general);
  }

  void execute(Direction direction, const plan::CallGeometry& call, const void* const* inputs, void* const* outputs,
               void* stream) override {
    BASP_CHECK(call.chunk.whole(), BASP_ERROR_UNSUPPORTED, direction_call(direction), ": head chunk ", call.chunk.index,
               " of ", call.chunk.count, ": the NCCL backend executes whole exchanges only");
    run(
        direction,
        [&](ncclComm_t comm, cudaStream_t s) { enqueue_exchange(*path_, direction, call, inputs, outputs, comm, s); },
        stream);
  }
  // Document boundaries set on the plan (basp_plan_set_documents) travel in the tag.
  void set_documents(uint64_t fingerprint) override { tag_.documents = fingerprint; }
  void check_split_phase() const override {
    detail::fail(BASP_ERROR_UNSUPPORTED, "batch plans of the NCCL backend run no split-phase head chunks ",
                 "(basp_scatter_start, basp_gather_start); the comm's ordinary plans do");
  }

 private:
  template <typename F>
  void run(Direction direction, F&& enqueue, void* stream) {
    const char* op = direction_call(direction);
    const detail::TraceRange range(direction == Direction::kScatter ? "basp:scatter" : "basp:gather");
    ncclComm_t comm = world_->get(op);
    const auto s = static_cast<cudaStream_t>(stream);
    shared_->claim(op);
    struct Release {
      BatchShared& shared;
      ~Release() { shared.release(); }
    } release{*shared_};
    DeviceScope scope(world_->device());
    // A group of one touches neither the pool nor the world communicator: it need not wait for the others.
    const bool exchanges = plan_.group_size > 1;
    const bool captured = shared_->before(s, exchanges, op);
    if (general_ != nullptr) {
      // Which execute of the plan this is, and which operation: a peer on another one (a scatter against a gather,
      // one execute behind) is found like a peer on another plan.
      layout::cuda::ExchangeTag tag = tag_;
      tag.call = 2 * executes_ + (direction == Direction::kScatter ? 1 : 0);
      general_->set_tag(tag);
    }
    try {
      enqueue(comm, s);
    } catch (const detail::Error&) {
      // Part of the exchange may be enqueued: the next execute must still wait for it.
      if (exchanges) shared_->after(s, captured, group_);
      throw;
    }
    if (exchanges) shared_->after(s, captured, group_);
    ++executes_;
    set_last_path(path_->id());
  }

  std::shared_ptr<GroupComm> world_;
  std::shared_ptr<BatchShared> shared_;
  std::shared_ptr<const BatchGroupInfo> group_;
  GeneralPath* general_ = nullptr;  // path_ when the group exchanges
  layout::cuda::ExchangeTag tag_;   // without `call`, set per execute
  int64_t executes_ = 0;            // enqueued executes of this plan (counted once enqueued whole)
};

}  // namespace

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options) {
  return std::make_unique<NcclExecutor>(std::move(comm), plan, options);
}

std::unique_ptr<PlanExecutor> make_batch_executor(std::shared_ptr<GroupComm> world, std::shared_ptr<BatchShared> shared,
                                                  const plan::ExchangePlan& plan, const GroupInBatch& group) {
  return std::make_unique<NcclBatchExecutor>(std::move(world), std::move(shared), plan, group);
}

}  // namespace basp::transport::nccl
