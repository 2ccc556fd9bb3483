#include "transport/nccl/nccl_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/packed_workspace.h"
#include "transport/nccl/nccl_batch.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {
namespace {

void check_launch(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) detail::fail_cuda(rc, what);
}

class DevicePath {
 public:
  virtual ~DevicePath() = default;
  virtual basp_path_t id() const = 0;
  virtual int64_t workspace_bytes() const { return 0; }
  virtual void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t comm,
                       cudaStream_t s) = 0;
  virtual void gather(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t comm,
                      cudaStream_t s) = 0;
};

class LocalCopyPath final : public DevicePath {
 public:
  explicit LocalCopyPath(const plan::ExchangePlan& plan) : plan_(plan) {}
  basp_path_t id() const override { return BASP_PATH_LOCAL; }
  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t, cudaStream_t s) override {
    copy(tokens, inputs, outputs, s);
  }
  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t, cudaStream_t s) override {
    copy(tokens, inputs, outputs, s);
  }

 private:
  void copy(int64_t tokens, const void* const* inputs, void* const* outputs, cudaStream_t s) {
    for (int32_t t = 0; t < plan_.num_tensors(); ++t) {
      const auto bytes = static_cast<size_t>(plan_.at(t, tokens).seq_tensor_bytes(0));
      if (bytes == 0) continue;
      BASP_CUDA_CHECK(cudaMemcpyAsync(outputs[t], inputs[t], bytes, cudaMemcpyDeviceToDevice, s));
    }
  }
  const plan::ExchangePlan& plan_;
};

class AllToAllPath final : public DevicePath {
 public:
  AllToAllPath(const plan::ExchangePlan& plan, int device)
      : plan_(plan), workspace_(layout::make_packed_workspace(plan.tensors.data(), plan.num_tensors())) {
    DeviceScope scope(device);
    check_launch(layout::cuda::prepare_row_copy(), "preparing the pack/unpack kernel");
    send_ = DeviceBuffer(workspace_.bytes());
    recv_ = DeviceBuffer(workspace_.bytes());
  }
  basp_path_t id() const override { return BASP_PATH_NCCL; }
  int64_t workspace_bytes() const override { return send_.bytes() + recv_.bytes(); }

  void scatter(int64_t, const void* const* inputs, void* const* outputs, ncclComm_t comm, cudaStream_t s) override {
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = plan_.tensors.data();
    check_launch(layout::cuda::launch_scatter_pack(g, n, workspace_, inputs, send_.get(), s), "scatter: pack");
    exchange(comm, s);
    check_launch(layout::cuda::launch_scatter_unpack(g, n, workspace_, recv_.get(), outputs, s), "scatter: unpack");
  }

  void gather(int64_t, const void* const* inputs, void* const* outputs, ncclComm_t comm, cudaStream_t s) override {
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = plan_.tensors.data();
    check_launch(layout::cuda::launch_gather_pack(g, n, workspace_, inputs, send_.get(), s), "gather: pack");
    exchange(comm, s);
    check_launch(layout::cuda::launch_gather_unpack(g, n, workspace_, recv_.get(), outputs, s), "gather: unpack");
  }

 private:
  // Every peer block has the same size: one all-to-all moves every tensor.
  void exchange(ncclComm_t comm, cudaStream_t s) {
    alltoall_bytes(send_.get(), recv_.get(), static_cast<size_t>(workspace_.peer_stride[0]), comm, s);
  }

  const plan::ExchangePlan& plan_;
  layout::PackedWorkspace workspace_;
  DeviceBuffer send_;
  DeviceBuffer recv_;
};

// How a batch plan's exchange differs from an ordinary one (nccl_batch.h): its peers are world ranks on the world
// communicator, its workspaces are the comm's pool, and a tag goes to every peer ahead of the data.
struct BatchWiring {
  std::vector<int32_t> peers;                 // the NCCL rank of each position
  std::byte* pool = nullptr;                  // PoolCarve::total bytes of the comm's pool
  layout::cuda::TagReport* report = nullptr;  // device view of the comm's report
  layout::cuda::ExchangeTag tag;              // this plan's (its call set per execute)
};

// Where a batch plan's pieces lie in its pool memory, for slotted workspaces of `workspace` bytes each: the send
// and receive workspaces (each rounded up to 256 bytes), the unpacks' guard word, the outgoing tag, and a tag slot
// per position.
struct PoolCarve {
  int64_t workspace = 0;  // offset of the receive workspace (the send one is at 0)
  int64_t skip = 0;
  int64_t tag_out = 0;
  int64_t tags_in = 0;
  int64_t total = 0;
};

PoolCarve carve_pool(int64_t workspace, int64_t group_size) {
  PoolCarve c;
  c.workspace = (std::max<int64_t>(workspace, 16) + 255) / 256 * 256;
  c.skip = 2 * c.workspace;
  c.tag_out = c.skip + 256;
  c.tags_in = c.tag_out + 256;
  c.total = c.tags_in + static_cast<int64_t>(sizeof(layout::cuda::ExchangeTag)) * group_size;
  return c;
}

// Any shape (docs/gpu.md): the chunks of every (tensor, peer) pair have their own sizes, so they travel as grouped
// ncclSend/ncclRecv between the slotted send and receive workspaces (layout/packed_workspace.h), sized at the
// plan's capacity; every launch and every NCCL call takes its counts from the call's geometry, so an execute of a
// fixed T can be captured in a CUDA graph. A tensor whose heads are replicated is unpacked by the summing kernel.
// A batch plan's (`wiring` set) also sends its tag to every peer first, and checks the tags that arrived before
// the unpacks, which write nothing when one is wrong.
class GeneralPath final : public DevicePath {
 public:
  GeneralPath(const plan::ExchangePlan& plan, int device, const BatchWiring* wiring = nullptr)
      : plan_(plan), workspace_(workspace_of(plan)) {
    DeviceScope scope(device);
    check_launch(layout::cuda::prepare_row_copy(), "preparing the pack/unpack kernel");
    if (wiring != nullptr) {
      wiring_ = *wiring;
      const PoolCarve c = carve_pool(workspace_.bytes(), plan_.group_size);
      send_ptr_ = wiring_.pool;
      recv_ptr_ = wiring_.pool + c.workspace;
      skip_ = reinterpret_cast<uint32_t*>(wiring_.pool + c.skip);
      tag_out_ = reinterpret_cast<layout::cuda::ExchangeTag*>(wiring_.pool + c.tag_out);
      tags_in_ = reinterpret_cast<layout::cuda::ExchangeTag*>(wiring_.pool + c.tags_in);
      return;
    }
    send_ = DeviceBuffer(std::max<int64_t>(workspace_.bytes(), 16));
    recv_ = DeviceBuffer(std::max<int64_t>(workspace_.bytes(), 16));
    send_ptr_ = send_.get();
    recv_ptr_ = recv_.get();
  }
  // The pool bytes a batch plan's path takes (BatchWiring::pool).
  static int64_t pool_bytes(const plan::ExchangePlan& plan) {
    return carve_pool(workspace_of(plan).bytes(), plan.group_size).total;
  }
  basp_path_t id() const override { return BASP_PATH_NCCL; }
  int64_t workspace_bytes() const override {
    return wiring_.pool != nullptr ? pool_bytes(plan_) : send_.bytes() + recv_.bytes();
  }

  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t comm,
               cudaStream_t s) override {
    const int32_t n = geometries(tokens);
    check_launch(layout::cuda::launch_scatter_pack(geom_, n, workspace_, inputs, send_ptr_, s), "scatter: pack");
    exchange(/*scatter=*/true, n, comm, s);
    check_launch(layout::cuda::launch_scatter_unpack(geom_, n, workspace_, recv_ptr_, outputs, s, skip_),
                 "scatter: unpack");
  }

  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, ncclComm_t comm,
              cudaStream_t s) override {
    const int32_t n = geometries(tokens);
    check_launch(layout::cuda::launch_gather_pack(geom_, n, workspace_, inputs, send_ptr_, s), "gather: pack");
    exchange(/*scatter=*/false, n, comm, s);
    // Tensors without replicated heads in one row-copy launch (a replicated one gets no rows there), then the
    // summing unpack of each replicated one.
    layout::Geometry plain[BASP_MAX_TENSORS];
    void* plain_out[BASP_MAX_TENSORS] = {};
    for (int32_t t = 0; t < n; ++t) {
      plain[t] = geom_[t];
      if (geom_[t].replicated()) {
        plain[t].b_loc = 0;
      } else {
        plain_out[t] = outputs[t];
      }
    }
    check_launch(layout::cuda::launch_gather_unpack(plain, n, workspace_, recv_ptr_, plain_out, s, skip_),
                 "gather: unpack");
    for (int32_t t = 0; t < n; ++t) {
      if (!geom_[t].replicated()) continue;
      layout::SumUnpackArgs a;
      a.geom = geom_[t];
      a.tensor = t;
      a.dtype = plan_.spec.dtype;
      a.seq = static_cast<unsigned char*>(outputs[t]);
      a.wire = reinterpret_cast<const unsigned char*>(recv_ptr_);
      a.workspace = workspace_;
      a.skip = skip_;
      check_launch(layout::cuda::launch_sum_unpack(a, s), "gather: summing unpack");
    }
  }

 private:
  int32_t geometries(int64_t tokens) {
    const int32_t n = plan_.num_tensors();
    for (int32_t t = 0; t < n; ++t) geom_[t] = plan_.at(t, tokens);
    return n;
  }

  // Scatter: this rank's rows of peer j's heads go out, peer j's rows of this rank's heads come in; a gather the
  // other way round. Chunks of no bytes are not sent. A batch plan's tag goes to every peer first (NCCL matches
  // a pair's messages in order), so every pair of the group exchanges at least the tag.
  void exchange(bool scatter, int32_t n, ncclComm_t comm, cudaStream_t s) {
    const int64_t k = plan_.group_size;
    const int64_t me = plan_.position;
    const bool tagged = tag_out_ != nullptr;
    if (tagged) check_launch(layout::cuda::launch_write_tag(tag_out_, wiring_.tag, s), "writing the tag");
    BASP_NCCL_CHECK(ncclGroupStart());
    // A failed call inside the group must not leave this thread's NCCL group open.
    struct GroupEnd {
      bool open = true;
      ~GroupEnd() {
        if (open) ncclGroupEnd();
      }
    } group_end;
    if (tagged) {
      for (int64_t j = 0; j < k; ++j) {
        if (j == me) continue;
        const int peer = peer_of(j);
        BASP_NCCL_CHECK(ncclSend(tag_out_, sizeof(layout::cuda::ExchangeTag), ncclUint8, peer, comm, s));
        BASP_NCCL_CHECK(ncclRecv(tags_in_ + j, sizeof(layout::cuda::ExchangeTag), ncclUint8, peer, comm, s));
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = geom_[t];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t out = scatter ? g.chunk_bytes(me, j) : g.chunk_bytes(j, me);
        const int64_t in = scatter ? g.chunk_bytes(j, me) : g.chunk_bytes(me, j);
        const int peer = peer_of(j);
        if (out > 0) {
          BASP_NCCL_CHECK(
              ncclSend(send_ptr_ + workspace_.chunk_offset(t, j), static_cast<size_t>(out), ncclUint8, peer, comm, s));
        }
        if (in > 0) {
          BASP_NCCL_CHECK(
              ncclRecv(recv_ptr_ + workspace_.chunk_offset(t, j), static_cast<size_t>(in), ncclUint8, peer, comm, s));
        }
      }
    }
    group_end.open = false;
    BASP_NCCL_CHECK(ncclGroupEnd());
    if (tagged) {
      check_launch(layout::cuda::launch_check_tags(tags_in_, static_cast<int32_t>(k), static_cast<int32_t>(me),
                                                   wiring_.tag, skip_, wiring_.report, s),
                   "checking the tags");
    }
  }

 public:
  // A batch plan's tag for the next execute (BatchWiring::tag).
  void set_tag(const layout::cuda::ExchangeTag& tag) { wiring_.tag = tag; }

 private:
  static layout::PackedWorkspace workspace_of(const plan::ExchangePlan& plan) {
    return layout::make_slotted_workspace(plan.tensors.data(), plan.num_tensors());
  }

  int peer_of(int64_t position) const {
    return wiring_.peers.empty() ? static_cast<int>(position) : wiring_.peers[static_cast<size_t>(position)];
  }

  const plan::ExchangePlan& plan_;
  layout::PackedWorkspace workspace_;
  layout::Geometry geom_[BASP_MAX_TENSORS];
  DeviceBuffer send_;
  DeviceBuffer recv_;
  BatchWiring wiring_;
  std::byte* send_ptr_ = nullptr;
  std::byte* recv_ptr_ = nullptr;
  // A batch plan's, in its pool memory (carve_pool); nullptr otherwise.
  uint32_t* skip_ = nullptr;
  layout::cuda::ExchangeTag* tag_out_ = nullptr;
  layout::cuda::ExchangeTag* tags_in_ = nullptr;
};

class NcclExecutor final : public PlanExecutor {
 public:
  NcclExecutor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan, ExecutorOptions options)
      : comm_(std::move(comm)), plan_(plan) {
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
    }
    check_tokens_ = options.check_tokens && plan_.spec.thd() && plan_.group_size > 1;
    where_ = options.where;
    timeout_ms_ = options.timeout_ms;
  }

  int64_t workspace_bytes() const override { return path_->workspace_bytes(); }
  basp_path_t plan_path() const override { return path_->id(); }
  basp_path_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }
  int32_t last_control_rounds() const override { return 0; }

  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("scatter");
    if (check_tokens_) agree_on_tokens("basp_scatter_tokens", tokens);
    DeviceScope scope(comm_->device());
    path_->scatter(tokens, inputs, outputs, comm, static_cast<cudaStream_t>(stream));
    last_path_.store(path_->id(), std::memory_order_relaxed);
  }

  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("gather");
    if (check_tokens_) agree_on_tokens("basp_gather_tokens", tokens);
    DeviceScope scope(comm_->device());
    path_->gather(tokens, inputs, outputs, comm, static_cast<cudaStream_t>(stream));
    last_path_.store(path_->id(), std::memory_order_relaxed);
  }

 private:
  // BASP_CHECK_TOKENS=1 (debugging): every rank of the group must pass the same T, checked by a host-side
  // all-gather before anything is enqueued. Blocks the calling thread until the group's ranks arrive.
  // The document boundaries' fingerprint (basp_plan_set_documents) travels with T.
  void agree_on_tokens(const char* call, int64_t tokens) {
    const auto k = static_cast<size_t>(plan_.group_size);
    const int64_t mine[2] = {tokens, static_cast<int64_t>(documents_)};
    std::vector<int64_t> all(2 * k);
    comm_->allgather(mine, sizeof mine, all.data(), std::string("the token-count check of ") + call, where_,
                     detail::Deadline(timeout_ms_));
    for (size_t j = 0; j < k; ++j) {
      if (all[2 * j] == mine[0] && all[2 * j + 1] == mine[1]) continue;
      std::string counts;
      for (size_t i = 0; i < k; ++i) {
        counts += (i ? ", " : "") + std::to_string(all[2 * i]);
        if (all[2 * i + 1] != mine[1]) counts += " (other document boundaries)";
      }
      detail::fail(BASP_ERROR_MISMATCH, call, ": the ranks of ", where_,
                   " passed different token counts or document boundaries (T by position: ", counts,
                   "); BASP_CHECK_TOKENS=1 found it");
    }
  }
  void set_documents(uint64_t fingerprint) override { documents_ = fingerprint; }

  std::shared_ptr<GroupComm> comm_;
  plan::ExchangePlan plan_;
  std::unique_ptr<DevicePath> path_;
  bool check_tokens_ = false;
  uint64_t documents_ = 0;
  std::string where_;
  int64_t timeout_ms_ = BASP_DEFAULT_TIMEOUT_MS;
  std::atomic<basp_path_t> last_path_{BASP_PATH_NONE};  // read by basp_plan_query from any thread
};

// A batch plan's executor (nccl_batch.h): the local copy for a group of one, else the general path over the
// world communicator, wired to the comm's pool; every execute claims the comm's batch executes, fails with what an
// earlier exchange found, and orders itself after the previous one on the device.
class NcclBatchExecutor final : public PlanExecutor {
 public:
  NcclBatchExecutor(std::shared_ptr<GroupComm> world, std::shared_ptr<BatchShared> shared,
                    const plan::ExchangePlan& plan, const BatchGroup& group)
      : world_(std::move(world)), shared_(std::move(shared)), plan_(plan) {
    auto info = std::make_shared<BatchGroupInfo>();
    info->batch_id = group.batch_id;
    info->where = group.group.where;
    info->members = group.group.members;
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

  int64_t workspace_bytes() const override { return path_->workspace_bytes(); }
  basp_path_t plan_path() const override { return path_->id(); }
  basp_path_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }
  int32_t last_control_rounds() const override { return 0; }

  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    run(
        "basp_scatter", true,
        [&](ncclComm_t comm, cudaStream_t s) { path_->scatter(tokens, inputs, outputs, comm, s); }, stream);
  }
  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    run(
        "basp_gather", false, [&](ncclComm_t comm, cudaStream_t s) { path_->gather(tokens, inputs, outputs, comm, s); },
        stream);
  }
  // Document boundaries set on the plan (basp_plan_set_documents) travel in the tag.
  void set_documents(uint64_t fingerprint) override { tag_.documents = fingerprint; }

 private:
  template <typename F>
  void run(const char* op, bool scatter, F&& enqueue, void* stream) {
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
      tag.call = 2 * executes_ + (scatter ? 1 : 0);
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
    last_path_.store(path_->id(), std::memory_order_relaxed);
  }

  std::shared_ptr<GroupComm> world_;
  std::shared_ptr<BatchShared> shared_;
  plan::ExchangePlan plan_;
  std::shared_ptr<const BatchGroupInfo> group_;
  std::unique_ptr<DevicePath> path_;
  GeneralPath* general_ = nullptr;  // path_ when the group exchanges
  layout::cuda::ExchangeTag tag_;   // without `call`, set per execute
  int64_t executes_ = 0;            // enqueued executes of this plan (counted once enqueued whole)
  std::atomic<basp_path_t> last_path_{BASP_PATH_NONE};
};

}  // namespace

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options) {
  return std::make_unique<NcclExecutor>(std::move(comm), plan, options);
}

std::unique_ptr<PlanExecutor> make_batch_executor(std::shared_ptr<GroupComm> world, std::shared_ptr<BatchShared> shared,
                                                  const plan::ExchangePlan& plan, const BatchGroup& group) {
  return std::make_unique<NcclBatchExecutor>(std::move(world), std::move(shared), plan, group);
}

}  // namespace basp::transport::nccl
