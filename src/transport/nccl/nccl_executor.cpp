#include "transport/nccl/nccl_executor.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <utility>

#include "common/cuda_check.h"
#include "common/error.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/packed_workspace.h"
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
    send_ = DeviceBuffer(workspace_.bytes(plan_.group_size));
    recv_ = DeviceBuffer(workspace_.bytes(plan_.group_size));
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
    alltoall_bytes(send_.get(), recv_.get(), static_cast<size_t>(workspace_.peer_stride), comm, s);
  }

  const plan::ExchangePlan& plan_;
  layout::PackedWorkspace workspace_;
  DeviceBuffer send_;
  DeviceBuffer recv_;
};

class NcclExecutor final : public PlanExecutor {
 public:
  NcclExecutor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan, ExecutorOptions options)
      : comm_(std::move(comm)), plan_(plan) {
    if (options.local_copy_when_alone && plan_.group_size == 1) {
      path_ = std::make_unique<LocalCopyPath>(plan_);
    } else {
      // The device path exchanges the textbook shape only, for now (docs/gpu.md): every chunk the same size.
      for (const layout::Geometry& g : plan_.tensors) {
        BASP_CHECK(g.uniform() && !plan_.spec.thd(), BASP_ERROR_UNSUPPORTED,
                   "the NCCL backend exchanges only shapes whose sequence length and head counts the group size (", g.k,
                   ") divides, with every tensor query-like and not THD; seq_len ", g.seq_len, ", num_heads ", g.heads,
                   " (following ", g.split_heads, "), layout ", plan_.spec.layout,
                   ": use the MPI backend for this shape");
      }
      path_ = std::make_unique<AllToAllPath>(plan_, comm_->device());
    }
  }

  int64_t workspace_bytes() const override { return path_->workspace_bytes(); }
  basp_path_t plan_path() const override { return path_->id(); }
  basp_path_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }
  int32_t last_control_rounds() const override { return 0; }

  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("scatter");
    DeviceScope scope(comm_->device());
    path_->scatter(tokens, inputs, outputs, comm, static_cast<cudaStream_t>(stream));
    last_path_.store(path_->id(), std::memory_order_relaxed);
  }

  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("gather");
    DeviceScope scope(comm_->device());
    path_->gather(tokens, inputs, outputs, comm, static_cast<cudaStream_t>(stream));
    last_path_.store(path_->id(), std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<GroupComm> comm_;
  plan::ExchangePlan plan_;
  std::unique_ptr<DevicePath> path_;
  std::atomic<basp_path_t> last_path_{BASP_PATH_NONE};  // read by basp_plan_query from any thread
};

}  // namespace

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options) {
  return std::make_unique<NcclExecutor>(std::move(comm), plan, options);
}

}  // namespace basp::transport::nccl
