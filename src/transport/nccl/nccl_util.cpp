#include "transport/nccl/nccl_util.h"

#include <dlfcn.h>

#include <chrono>
#include <thread>

namespace basp::transport::nccl {

int runtime_version() {
  int version = 0;
  BASP_NCCL_CHECK(ncclGetVersion(&version));
  return version;
}

std::string library_path() {
  Dl_info info{};
  // The address of the function this library calls resolves to the file the dynamic linker bound it to.
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::string error_string(ncclResult_t rc) {
  std::string out = ncclGetErrorString(rc);
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') out += std::string(": ") + detail;
  return out;
}

namespace {

// Device memory ordered on `stream`: cudaMallocAsync / cudaFreeAsync where the device has memory pools, else
// cudaMalloc / cudaFree (whose free synchronises the whole device: only on devices without memory pools).
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    cudaError_t rc = cudaMallocAsync(&ptr_, bytes, stream);
    if (rc == cudaErrorNotSupported) {
      cudaGetLastError();
      pooled_ = false;
      rc = cudaMalloc(&ptr_, bytes);
    }
    if (rc != cudaSuccess) {
      ptr_ = nullptr;
      detail::fail_cuda(rc, "allocating the device buffer of a host-side NCCL collective");
    }
  }
  ~StreamBuffer() {
    if (ptr_ == nullptr || leaked_) return;
    if (pooled_) {
      cudaFreeAsync(ptr_, stream_);
    } else {
      cudaFree(ptr_);
    }
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  void* get() const { return ptr_; }
  // The stream may never complete: a pooled buffer is still freed in stream order (whenever it does); a plain
  // one is left alone, since cudaFree would wait for the device.
  void abandon() { leaked_ = !pooled_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  bool pooled_ = true;
  bool leaked_ = false;
};

class PrivateStream {
 public:
  PrivateStream() { BASP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  // Returns at once; the stream's resources are released when its work completes.
  ~PrivateStream() { cudaStreamDestroy(stream_); }
  PrivateStream(const PrivateStream&) = delete;
  PrivateStream& operator=(const PrivateStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace

void collective_to_host(ncclComm_t comm, int device, const HostCollective& op, const std::string& step,
                        const std::string& where, const detail::Deadline& deadline, const EnqueueGuard& guard) {
  DeviceScope scope(device);
  PrivateStream stream;  // declared before the buffers: destroyed after their stream-ordered release
  StreamBuffer send_d(op.send_bytes, stream.get());
  StreamBuffer recv_d(op.recv_bytes, stream.get());
  BASP_CUDA_CHECK(cudaMemcpyAsync(send_d.get(), op.send, op.send_bytes, cudaMemcpyHostToDevice, stream.get()));
  const auto enqueue = [&] { op.enqueue(send_d.get(), recv_d.get(), comm, stream.get()); };
  if (guard) {
    guard(enqueue);
  } else {
    enqueue();
  }
  cudaError_t state = cudaStreamQuery(stream.get());
  while (state == cudaErrorNotReady) {
    if (deadline.expired()) {
      send_d.abandon();
      recv_d.abandon();
      detail::fail(BASP_ERROR_TIMEOUT, "timed out after ", deadline.elapsed_ms(), " ms (timeout ",
                   deadline.timeout_ms(), " ms: config->timeout_ms or BASP_TIMEOUT_MS) in ", step, " in ", where,
                   ": a rank did not join the ", op.name,
                   " (or it waits behind work enqueued earlier on the same "
                   "NCCL communicator), which stays enqueued: that NCCL communicator must be aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    state = cudaStreamQuery(stream.get());
  }
  if (state != cudaSuccess) detail::fail_cuda(state, step.c_str());
  // The stream is idle: this pageable copy returns as soon as it is done.
  BASP_CUDA_CHECK(cudaMemcpyAsync(op.recv, recv_d.get(), op.recv_bytes, cudaMemcpyDeviceToHost, stream.get()));
  BASP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

HostCollective allgather_op(const void* send, size_t bytes, void* recv, int size) {
  HostCollective op;
  op.name = "ncclAllGather";
  op.send = send;
  op.send_bytes = bytes;
  op.recv = recv;
  op.recv_bytes = bytes * static_cast<size_t>(size);
  op.enqueue = [bytes](void* s, void* r, ncclComm_t c, cudaStream_t st) {
    BASP_NCCL_CHECK(ncclAllGather(s, r, bytes, ncclUint8, c, st));
  };
  return op;
}

HostCollective alltoall_op(const void* send, size_t bytes_per_peer, void* recv, int size) {
  HostCollective op;
  op.name = "ncclAlltoAll";
  op.send = send;
  op.send_bytes = bytes_per_peer * static_cast<size_t>(size);
  op.recv = recv;
  op.recv_bytes = op.send_bytes;
  op.enqueue = [bytes_per_peer](void* s, void* r, ncclComm_t c, cudaStream_t st) {
    alltoall_bytes(s, r, bytes_per_peer, c, st);
  };
  return op;
}

void allgather_to_host(ncclComm_t comm, int device, const void* send, size_t bytes, void* recv, const std::string& step,
                       const std::string& where, const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm, &size));
  collective_to_host(comm, device, allgather_op(send, bytes, recv, size), step, where, deadline);
}

void alltoall_bytes(const void* send, void* recv, size_t bytes_per_peer, ncclComm_t comm, cudaStream_t stream) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  BASP_NCCL_CHECK(ncclAlltoAll(send, recv, bytes_per_peer, ncclUint8, comm, stream));
#else
  // NCCL before 2.28 has no ncclAlltoAll: the same exchange as grouped point-to-point operations.
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm, &size));
  BASP_NCCL_CHECK(ncclGroupStart());
  for (int j = 0; j < size; ++j) {
    const size_t off = static_cast<size_t>(j) * bytes_per_peer;
    BASP_NCCL_CHECK(ncclSend(static_cast<const std::byte*>(send) + off, bytes_per_peer, ncclUint8, j, comm, stream));
    BASP_NCCL_CHECK(ncclRecv(static_cast<std::byte*>(recv) + off, bytes_per_peer, ncclUint8, j, comm, stream));
  }
  BASP_NCCL_CHECK(ncclGroupEnd());
#endif
}

int require_device(const char* what) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    detail::fail(BASP_ERROR_CUDA, what, " needs a CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorName(rc), ": ",
                 cudaGetErrorString(rc));
  }
  BASP_CHECK(count > 0, BASP_ERROR_CUDA, what, " needs a CUDA device: none is visible");
  int device = -1;
  BASP_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

DeviceScope::DeviceScope(int device) : device_(device) {
  BASP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) BASP_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

DeviceBuffer::DeviceBuffer(int64_t bytes) : bytes_(bytes) {
  if (bytes <= 0) return;
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "device workspace of ", bytes,
                 " bytes: cudaMalloc failed: ", cudaGetErrorString(rc));
  }
  if (rc != cudaSuccess) detail::fail_cuda(rc, "cudaMalloc(workspace)");
  ptr_ = static_cast<std::byte*>(p);
  // On the legacy stream, then waited for: the caller's streams may be non-blocking ones.
  cudaError_t set = cudaMemset(ptr_, 0, static_cast<size_t>(bytes));
  if (set == cudaSuccess) set = cudaStreamSynchronize(nullptr);
  if (set != cudaSuccess) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    detail::fail_cuda(set, "cudaMemset(workspace)");
  }
}

void DeviceBuffer::release() noexcept {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace basp::transport::nccl
