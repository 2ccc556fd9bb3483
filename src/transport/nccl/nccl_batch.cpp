#include "transport/nccl/nccl_batch.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/rank_list.h"
#include "transport/nccl/nccl_executor.h"

namespace basp::transport::nccl {

BatchShared::BatchShared(std::shared_ptr<GroupComm> world, int64_t timeout_ms)
    : world_(std::move(world)), device_(world_->device()), timeout_ms_(timeout_ms) {
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
  const cudaError_t ev = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  if (ev != cudaSuccess) {
    cudaFreeHost(host);
    detail::fail_cuda(ev, "creating the batch plans' event");
  }
}

BatchShared::~BatchShared() {
  DeviceScope scope(device_);
  if (pending_) {
    // Its tag check may still write the report, its exchange still use the pool.
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state != cudaErrorNotReady) break;
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since_).count();
      if (timeout_ms_ > 0 && waited > timeout_ms_) {
        // Hung: ncclCommAbort ends its kernels; then the event completes.
        try {
          world_->abort();
        } catch (const detail::Error&) {
        }
        cudaEventSynchronize(done_);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cudaGetLastError();
  }
  buffers_.clear();  // on this device
  cudaEventDestroy(done_);
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
  std::lock_guard<std::mutex> lock(mutex_);
  // While `stream` is captured the event is neither queried nor waited for (a query of work outside the capture
  // may invalidate it); the report is host memory, read as always.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BASP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool captured = capture != cudaStreamCaptureStatusNone;
  std::string message;
  const basp_status_t found = check_locked(message, /*query_event=*/!captured);
  if (found != BASP_SUCCESS) detail::fail(found, op, ": ", message);
  if (ordered && pending_ && !captured) BASP_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
  return captured;
}

void BatchShared::after(cudaStream_t stream, bool captured, const std::shared_ptr<const BatchGroupInfo>& group) {
  std::lock_guard<std::mutex> lock(mutex_);
  recent_[next_recent_ % recent_.size()] = group;  // a shared_ptr copy: no allocation
  ++next_recent_;
  if (captured) return;
  BASP_CUDA_CHECK(cudaEventRecord(done_, stream));
  pending_ = true;
  since_ = std::chrono::steady_clock::now();
}

basp_status_t BatchShared::check(std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  return check_locked(message, true);
}

basp_status_t BatchShared::check_locked(std::string& message, bool query_event) {
  // The device writes the fields before `found` (__threadfence_system): an acquire load of `found` first.
  if (__atomic_load_n(&report_host_->found, __ATOMIC_ACQUIRE) != 0) {
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
              " the tag of another batch plan or execute (" + describe(r.seen) +
              "; this rank: " + describe(r.expected) +
              "): the ranks were given different batch descriptions, made their batch plans in another order, or "
              "called different operations; that exchange's outputs were not written";
    return BASP_ERROR_MISMATCH;
  }
  if (!pending_ || !query_event) return BASP_SUCCESS;
  const cudaError_t state = cudaEventQuery(done_);
  if (state == cudaSuccess) {
    pending_ = false;
    return BASP_SUCCESS;
  }
  if (state != cudaErrorNotReady) {
    cudaGetLastError();
    message = std::string("the last batch exchange failed on the device: ") + cudaGetErrorString(state);
    return BASP_ERROR_CUDA;
  }
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since_).count();
  if (timeout_ms_ <= 0 || waited <= timeout_ms_) return BASP_SUCCESS;
  world_->mark_errored();  // never ncclCommDestroy now: it would wait for the hung exchange
  const auto& last = recent_[(next_recent_ + recent_.size() - 1) % recent_.size()];
  message = "the exchange of " + (last ? last->where : std::string("the last batch plan")) + " has not ended " +
            std::to_string(waited) + " ms after it was enqueued (the comm's timeout is " + std::to_string(timeout_ms_) +
            " ms): a rank of " +
            (last ? "world ranks " + detail::compress_ranks(last->members) : std::string("its group")) +
            " is not in it (another batch plan, or none); abort the comm (basp_comm_abort)";
  return BASP_ERROR_TIMEOUT;
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
                                                                      const BatchGroup& group) {
  return nccl::make_batch_executor(world_, shared_, plan, group);
}

basp_status_t NcclBatchTransport::async_error(std::string& message) {
  const basp_status_t world = world_->async_error(message);
  if (world != BASP_SUCCESS) return world;
  return shared_->check(message);
}

}  // namespace basp::transport::nccl
