#include "transport/nccl/nccl_batch.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/rank_list.h"
#include "transport/nccl/nccl_executor.h"

namespace basp::transport::nccl {

BatchShared::BatchShared(std::shared_ptr<GroupComm> world, int64_t timeout_ms) : device_(world->device()) {
  DeviceScope scope(device_);
  void* host = nullptr;
  BASP_CUDA_CHECK(cudaHostAlloc(&host, sizeof(layout::cuda::TagReport), cudaHostAllocMapped));
  report_host_ = new (host) layout::cuda::TagReport();
  void* device_view = nullptr;
  const cudaError_t rc = cudaHostGetDevicePointer(&device_view, host, 0);
  if (rc != cudaSuccess) {
    cudaFreeHost(host);
    detail::fail_cuda(rc, "mapping the batch plans' tag report into the device");
  }
  report_device_ = static_cast<layout::cuda::TagReport*>(device_view);
  try {
    watch_ = std::make_unique<ExchangeWatch>(std::move(world), timeout_ms);
  } catch (const detail::Error&) {
    cudaFreeHost(host);
    throw;
  }
}

BatchShared::~BatchShared() {
  DeviceScope scope(device_);
  watch_.reset();    // its tag check may still write the report, its exchange still use the pool
  buffers_.clear();  // on this device
  cudaFreeHost(report_host_);
}

std::byte* BatchShared::reserve(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bytes = std::max<int64_t>(bytes, 256);
  if (buffers_.empty() || buffers_.back().bytes() < bytes) {
    // At least doubling, so that a comm whose plans grow step by step keeps few buffers.
    const int64_t grown = buffers_.empty() ? bytes : std::max(bytes, 2 * buffers_.back().bytes());
    DeviceScope scope(device_);
    buffers_.emplace_back((grown + 255) / 256 * 256);
  }
  return buffers_.back().get();
}

void BatchShared::claim(const char* op) {
  bool expected = false;
  BASP_CHECK_ARG(busy_.compare_exchange_strong(expected, true, std::memory_order_acq_rel), op,
                 ": another batch plan of this comm is executing on another thread; the executes of one comm's "
                 "batch plans must be serialised (they share its world communicator and workspace pool)");
}

bool BatchShared::before(cudaStream_t stream, bool ordered, const char* op) {
  // The report is host memory, read as always, also while `stream` is captured.
  std::string message;
  const basp_status_t found = check_report(message);
  if (found != BASP_SUCCESS) detail::fail(found, op, ": ", message);
  return watch_->before(stream, ordered, op);
}

void BatchShared::after(cudaStream_t stream, bool captured, const std::shared_ptr<const BatchGroupInfo>& group) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recent_[next_recent_ % recent_.size()] = group;  // a shared_ptr copy: no allocation
    ++next_recent_;
  }
  watch_->after(stream, captured, group->exchange);
}

basp_status_t BatchShared::check(std::string& message) {
  const basp_status_t found = check_report(message);
  if (found != BASP_SUCCESS) return found;
  return watch_->check(message);
}

basp_status_t BatchShared::check_report(std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The device writes the fields before `found` (__threadfence_system): an acquire load of `found` first.
  if (__atomic_load_n(&report_host_->found, __ATOMIC_ACQUIRE) == 0) return BASP_SUCCESS;
  const layout::cuda::TagReport r = *report_host_;
  std::shared_ptr<const BatchGroupInfo> group;
  for (const auto& g : recent_) {
    if (g && g->batch_id == r.batch_id) group = g;
  }
  std::string who = "position " + std::to_string(r.position);
  if (group && r.position >= 0 && static_cast<size_t>(r.position) < group->members.size()) {
    who = "world rank " + std::to_string(group->members[static_cast<size_t>(r.position)]);
  }
  const auto describe = [](const layout::cuda::ExchangeTag& t) {
    return "batch plan " + std::to_string(t.batch_id) + ", fingerprint " + std::to_string(t.fingerprint) +
           ", documents " + std::to_string(t.documents) + ", " + (t.call % 2 == 1 ? "scatter" : "gather") +
           " of execute " + std::to_string(t.call / 2);
  };
  message = "the exchange of batch plan " + std::to_string(r.batch_id) +
            (group ? " in " + group->where : std::string()) + " received from " + who +
            " the tag of another batch plan or execute (" + describe(r.seen) + "; this rank: " + describe(r.expected) +
            "): the ranks were given different batch descriptions, made their batch plans in another order, or "
            "called different operations; that exchange's outputs were not written";
  return BASP_ERROR_MISMATCH;
}

NcclBatchTransport::NcclBatchTransport(std::shared_ptr<GroupComm> world, const GroupSpec& spec)
    : world_(std::move(world)),
      shared_(std::make_shared<BatchShared>(world_, spec.timeout_ms)),
      bootstrap_(world_, spec.members, spec.where, spec.position),
      timeout_ms_(spec.timeout_ms) {
  DeviceScope scope(world_->device());
  BASP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclBatchTransport::~NcclBatchTransport() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

namespace {

class DeviceMemory final : public BatchTransport::Buffer {
 public:
  DeviceMemory(int device, int64_t bytes) {
    DeviceScope scope(device);
    buffer_ = DeviceBuffer(std::max<int64_t>(bytes, 1));
  }
  void* get() override { return buffer_.get(); }

 private:
  DeviceBuffer buffer_;
};

}  // namespace

std::unique_ptr<BatchTransport::Buffer> NcclBatchTransport::buffer(int64_t bytes) {
  return std::make_unique<DeviceMemory>(world_->device(), bytes);
}

void NcclBatchTransport::finish(void* stream) {
  const detail::Deadline deadline(timeout_ms_);
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(static_cast<cudaStream_t>(stream));
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) detail::fail_cuda(rc, "waiting for a batch exchange");
    std::string message;
    const basp_status_t found = shared_->check(message);
    if (found != BASP_SUCCESS) detail::fail(found, message);
    BASP_CHECK(!deadline.expired(), BASP_ERROR_TIMEOUT, "a batch exchange of basp_comm_calibrate has not ended after ",
               timeout_ms_, " ms: a rank of the comm is not calibrating");
    std::this_thread::yield();
  }
}

std::unique_ptr<PlanExecutor> NcclBatchTransport::make_batch_executor(const plan::ExchangePlan& plan,
                                                                      const GroupInBatch& group) {
  return nccl::make_batch_executor(world_, shared_, plan, group);
}

basp_status_t NcclBatchTransport::async_error(std::string& message) {
  const basp_status_t world = world_->async_error(message);
  if (world != BASP_SUCCESS) return world;
  return shared_->check(message);
}

}  // namespace basp::transport::nccl
