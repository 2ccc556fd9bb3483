#include "transport/nccl/nccl_transport.h"

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/packed_workspace.h"
#include "runtime/consistency.h"
#include "transport/nccl/nccl_locality.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

GroupComm::GroupComm(ncclComm_t comm, int device) : comm_(comm), device_(device) {}

GroupComm::~GroupComm() {
  if (aborted_.load()) return;
  // NCCL: a communicator with an asynchronous error must be aborted; ncclCommDestroy would wait for its
  // outstanding work, which may never finish. Asked once more here (it does not block), in case nobody queried.
  ncclResult_t state = ncclSuccess;
  const bool failed = errored_.load() || ncclCommGetAsyncError(comm_, &state) != ncclSuccess ||
                      (state != ncclSuccess && state != ncclInProgress);
  if (failed) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

ncclComm_t GroupComm::get(const char* op) const {
  BASP_CHECK(!aborted_.load(), BASP_ERROR_NCCL, op, ": the comm was aborted (basp_comm_abort); destroy its plans");
  return comm_;
}

basp_status_t GroupComm::async_error(std::string& message) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.load()) {
    message = "the comm was aborted (basp_comm_abort)";
    return BASP_ERROR_NCCL;
  }
  ncclResult_t state = ncclSuccess;
  BASP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
  // ncclInProgress only means a non-blocking operation has not finished: nothing failed.
  if (state == ncclSuccess || state == ncclInProgress) return BASP_SUCCESS;
  errored_.store(true);
  message = std::string(ncclGetErrorString(state));
  const char* detail = ncclGetLastError(comm_);
  if (detail != nullptr && detail[0] != '\0') message += std::string(": ") + detail;
  return BASP_ERROR_NCCL;
}

void GroupComm::allgather(const void* send, size_t bytes, void* recv, const std::string& step, const std::string& where,
                          const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm_, &size));
  collective(allgather_op(send, bytes, recv, size), step, where, deadline);
}

void GroupComm::alltoall(const void* send, size_t bytes_per_peer, void* recv, const std::string& step,
                         const std::string& where, const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm_, &size));
  collective(alltoall_op(send, bytes_per_peer, recv, size), step, where, deadline);
}

void GroupComm::collective(const HostCollective& op, const std::string& step, const std::string& where,
                           const detail::Deadline& deadline) {
  get(step.c_str());
  const EnqueueGuard guard = [this, &step](const std::function<void()>& enqueue) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    get(step.c_str());  // an abort may have come since
    enqueue();
  };
  try {
    collective_to_host(comm_, device_, op, step, where, deadline, guard);
  } catch (const detail::Error&) {
    // A timeout leaves the all-gather enqueued; any other failure leaves the communicator in an unknown state.
    // Either way it is aborted, not destroyed, when released.
    errored_.store(true);
    throw;
  }
  BASP_CHECK(!aborted_.load(), BASP_ERROR_NCCL, step, ": the comm was aborted (basp_comm_abort) during it");
}

void GroupComm::abort() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.exchange(true)) return;
  BASP_NCCL_CHECK(ncclCommAbort(comm_));
}

namespace {

class NcclExecutor final : public PlanExecutor {
 public:
  NcclExecutor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan, ExecutorOptions options)
      : comm_(std::move(comm)),
        plan_(plan),
        workspace_(layout::make_packed_workspace(plan.tensors.data(), plan.num_tensors())),
        direct_(options.direct_copy_when_alone && plan.group_size == 1) {
    if (direct_) return;
    DeviceScope scope(comm_->device());
    check_launch(layout::cuda::prepare_row_copy(), "preparing the pack/unpack kernel");
    send_ = DeviceBuffer(workspace_.bytes(plan_.group_size));
    recv_ = DeviceBuffer(workspace_.bytes(plan_.group_size));
  }

  int64_t workspace_bytes() const override { return send_.bytes() + recv_.bytes(); }
  int32_t last_path() const override { return last_path_; }

  void scatter(const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("scatter");
    DeviceScope scope(comm_->device());
    auto s = static_cast<cudaStream_t>(stream);
    if (direct_) return copy_tensors(inputs, outputs, s);
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = plan_.tensors.data();
    check_launch(layout::cuda::launch_scatter_pack(g, n, workspace_, inputs, send_.get(), s), "scatter: pack");
    exchange(comm, s);
    check_launch(layout::cuda::launch_scatter_unpack(g, n, workspace_, recv_.get(), outputs, s), "scatter: unpack");
    last_path_ = BASP_PATH_NCCL;
  }

  void gather(const void* const* inputs, void* const* outputs, void* stream) override {
    ncclComm_t comm = comm_->get("gather");
    DeviceScope scope(comm_->device());
    auto s = static_cast<cudaStream_t>(stream);
    if (direct_) return copy_tensors(inputs, outputs, s);
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = plan_.tensors.data();
    check_launch(layout::cuda::launch_gather_pack(g, n, workspace_, inputs, send_.get(), s), "gather: pack");
    exchange(comm, s);
    check_launch(layout::cuda::launch_gather_unpack(g, n, workspace_, recv_.get(), outputs, s), "gather: unpack");
    last_path_ = BASP_PATH_NCCL;
  }

 private:
  static void check_launch(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) detail::fail_cuda(rc, what);
  }

  // K = 1: the two layouts of a tensor are the same bytes.
  void copy_tensors(const void* const* inputs, void* const* outputs, cudaStream_t s) {
    for (int32_t t = 0; t < plan_.num_tensors(); ++t) {
      const auto bytes = static_cast<size_t>(plan_.tensors[t].tensor_bytes());
      BASP_CUDA_CHECK(cudaMemcpyAsync(outputs[t], inputs[t], bytes, cudaMemcpyDeviceToDevice, s));
    }
    last_path_ = BASP_PATH_LOCAL;
  }

  // Every peer block has the same size: one all-to-all moves every tensor.
  void exchange(ncclComm_t comm, cudaStream_t s) {
    alltoall_bytes(send_.get(), recv_.get(), static_cast<size_t>(workspace_.peer_stride), comm, s);
  }

  std::shared_ptr<GroupComm> comm_;
  plan::ExchangePlan plan_;
  layout::PackedWorkspace workspace_;
  bool direct_;
  DeviceBuffer send_;
  DeviceBuffer recv_;
  int32_t last_path_ = BASP_PATH_NONE;
};

}  // namespace

std::unique_ptr<PlanExecutor> make_executor(std::shared_ptr<GroupComm> comm, const plan::ExchangePlan& plan,
                                            ExecutorOptions options) {
  return std::make_unique<NcclExecutor>(std::move(comm), plan, options);
}

std::unique_ptr<PlanExecutor> NcclGroupTransport::make_executor(const plan::ExchangePlan& plan) {
  return nccl::make_executor(group_, plan);
}

void NcclGroupTransport::agree(const runtime::CallRecord& mine) {
  const detail::Deadline deadline(context_.timeout_ms);
  try {
    runtime::agree_by_allgather(
        [&](const void* send, size_t bytes, void* recv, const std::string& step) {
          group_->allgather(send, bytes, recv, step, context_.where, deadline);
        },
        static_cast<int32_t>(context_.members.size()), context_.members, context_.where, mine);
  } catch (const detail::Error& e) {
    // A mismatch is found by every rank alike after complete all-gathers: the comm stays usable. Anything else
    // (a timeout, an NCCL or CUDA failure) leaves the ranks out of step.
    if (e.status() != BASP_ERROR_MISMATCH) health().mark_broken(e.status(), e.what());
    throw;
  }
}

void NcclGroupTransport::connect(const detail::Deadline& deadline) {
  const size_t size = context_.members.size();
  const auto position = static_cast<size_t>(context_.position);
  // The ring an all-gather uses, and the point-to-point connections of the exchange's all-to-all. Byte j that
  // position p sends to position q is (p * size + q) mod 256: what arrives is checked too.
  const auto code = [size](size_t from, size_t to) { return static_cast<uint8_t>((from * size + to) & 0xff); };
  const auto mine = static_cast<uint8_t>(position & 0xff);
  std::vector<uint8_t> all(size);
  group_->allgather(&mine, 1, all.data(), "connecting the group's NCCL communicator (all-gather)", context_.where,
                    deadline);
  for (size_t p = 0; p < size; ++p) {
    BASP_CHECK(all[p] == static_cast<uint8_t>(p & 0xff), BASP_ERROR_INTERNAL, "the group's ncclAllGather put ",
               static_cast<int>(all[p]), " at position ", p, " in ", context_.where);
  }
  std::vector<uint8_t> out(size);
  std::vector<uint8_t> in(size);
  for (size_t q = 0; q < size; ++q) out[q] = code(position, q);
  group_->alltoall(out.data(), 1, in.data(), "connecting the group's NCCL communicator (all-to-all)", context_.where,
                   deadline);
  for (size_t p = 0; p < size; ++p) {
    BASP_CHECK(in[p] == code(p, position), BASP_ERROR_INTERNAL, "the group's all-to-all delivered ",
               static_cast<int>(in[p]), " from position ", p, " in ", context_.where);
  }
}

void connect_group(runtime::Comm& comm, const detail::Deadline& deadline) {
  dynamic_cast<NcclGroupTransport&>(comm.transport()).connect(deadline);
}

basp_status_t NcclGroupTransport::async_error(std::string& message) {
  const basp_status_t status = group_->async_error(message);
  if (status != BASP_SUCCESS) health().mark_broken(status, message);
  return status;
}

void NcclGroupTransport::abort() {
  // Broken first: even when ncclCommAbort itself fails, the communicator is given up and later calls must not
  // reach it.
  health().mark_broken(BASP_ERROR_NCCL, "the comm was aborted (basp_comm_abort)");
  group_->abort();
}

std::shared_ptr<runtime::Comm> make_comm(plan::GroupLayout layout, int32_t rank, basp_placement_t placement,
                                         int64_t timeout_ms, ncclComm_t group, int device) {
  auto owner = std::make_shared<GroupComm>(group, device);
  int size = 0;
  int position = -1;
  BASP_NCCL_CHECK(ncclCommCount(group, &size));
  BASP_NCCL_CHECK(ncclCommUserRank(group, &position));
  BASP_CHECK(size == layout.group_size && position == layout.position_of[rank], BASP_ERROR_INTERNAL,
             "group communicator of rank ", rank, " has ", size, " ranks and puts it at ", position, "; the plan says ",
             layout.group_size, " and ", layout.position_of[rank]);
  GroupContext context;
  const int32_t g = layout.group_of[rank];
  context.members = layout.members[g];
  context.where = runtime::describe_group(layout, g);
  context.timeout_ms = timeout_ms;
  context.position = layout.position_of[rank];
  auto transport = std::make_unique<NcclGroupTransport>(std::move(owner), std::move(context));
  return std::make_shared<runtime::Comm>(std::move(layout), rank, placement, std::move(transport));
}

std::shared_ptr<runtime::Comm> create_comm(ncclComm_t parent, const runtime::CommOptions& options) {
  require_device("the NCCL backend");
  int size = 0;
  int rank = 0;
  int device = -1;
  BASP_NCCL_CHECK(ncclCommCount(parent, &size));
  BASP_NCCL_CHECK(ncclCommUserRank(parent, &rank));
  BASP_NCCL_CHECK(ncclCommCuDevice(parent, &device));
  // The comm's arguments (B, G, backend, placement) compared across the parent's ranks before anything depends
  // on them: one ncclAllGather of fingerprints, the records only on a difference (docs/reliability.md).
  const detail::Deadline deadline(options.timeout_ms);
  const std::string where = parent_where(size);
  std::vector<int32_t> labels(static_cast<size_t>(size));
  for (int32_t r = 0; r < size; ++r) labels[static_cast<size_t>(r)] = r;
  basp_comm_config_v1 config = BASP_COMM_CONFIG_INITIALIZER;
  config.micro_batch = options.micro_batch;
  config.num_groups = options.num_groups;
  config.backend = options.backend;
  config.placement = options.placement;
  runtime::agree_by_allgather(
      [&](const void* send, size_t bytes, void* recv, const std::string& step) {
        allgather_to_host(parent, device, send, bytes, recv, step, where, deadline);
      },
      size, labels, where, runtime::describe_comm_create(&config, BASP_SUCCESS));
  // Every rank contributes its GPU's place in its node (gathered over the parent) for topology placement.
  const std::vector<topology::RankLocality> locality =
      allgather_locality(parent, device, local_gpu_locality(device), deadline);
  plan::GroupLayout layout = runtime::plan_groups(size, options, locality);
  const int32_t color = layout.group_of[rank];
  const int32_t key = layout.position_of[rank];
  DeviceScope scope(device);
  ncclComm_t group = nullptr;
  BASP_NCCL_CHECK(ncclCommSplit(parent, color, key, &group, nullptr));
  BASP_CHECK(group != nullptr, BASP_ERROR_INTERNAL, "ncclCommSplit(color ", color, ") returned no communicator");
  auto comm = make_comm(std::move(layout), rank, options.placement, options.timeout_ms, group, device);
  connect_group(*comm, deadline);
  return comm;
}

}  // namespace basp::transport::nccl
