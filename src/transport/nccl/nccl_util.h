// NCCL helpers: a checked-call macro that turns an NCCL result into BASP_ERROR_NCCL with NCCL's error string
// and its last-error detail, a device buffer owner, and a scoped switch of the current CUDA device.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/cuda_check.h"
#include "common/deadline.h"
#include "common/error.h"

namespace basp::transport::nccl {

// The NCCL the library was linked to at run time: ncclGetVersion's code and the file that defines it ("" when the
// dynamic linker cannot say).
int runtime_version();
std::string library_path();

// "<ncclGetErrorString>: <ncclGetLastError>" (the second part when NCCL has one).
std::string error_string(ncclResult_t rc);

#define BASP_NCCL_CHECK(call)                                                                                          \
  do {                                                                                                                 \
    const ncclResult_t basp_nccl_rc_ = (call);                                                                         \
    if (basp_nccl_rc_ != ncclSuccess) {                                                                                \
      ::basp::detail::fail(BASP_ERROR_NCCL, #call, " failed: ", ::basp::transport::nccl::error_string(basp_nccl_rc_)); \
    }                                                                                                                  \
  } while (0)

// Runs `enqueue` (an NCCL call) for collective_to_host: the group comm holds its abort lock there and checks that
// it was not aborted, so that an abort on another thread never frees the communicator under the NCCL call.
using EnqueueGuard = std::function<void(const std::function<void()>& enqueue)>;

// One NCCL collective of the host-side steps (comm and plan creation, basp_mem_alloc/free; never an execute):
// `enqueue` issues it on device copies of `send` and `recv`; `name` names it in messages.
struct HostCollective {
  const char* name = "";
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  std::function<void(void* send, void* recv, ncclComm_t comm, cudaStream_t stream)> enqueue;
};

// Runs `op` host memory to host memory on a private non-blocking stream of `device`, with stream-ordered device
// buffers, so it does not wait for the caller's CUDA streams; NCCL, though, runs a communicator's operations in
// the order they were enqueued, so it does wait behind exchanges already enqueued on `comm`. The host polls the
// stream until `deadline`: a rank that never joins gives BASP_ERROR_TIMEOUT naming `step` and `where` instead of
// a hang. (Not covered: NCCL connects peers lazily, inside the first collective of a communicator that needs a
// connection, and that blocks in the NCCL call itself; the creators therefore connect a new group communicator
// right away.) After a timeout the collective stays enqueued (the device buffers are released only if it ever
// completes); the communicator must then be aborted. `guard`, when given, runs the enqueue (not the wait).
void collective_to_host(ncclComm_t comm, int device, const HostCollective& op, const std::string& step,
                        const std::string& where, const detail::Deadline& deadline,
                        const EnqueueGuard& guard = nullptr);

// ncclAllGather of `bytes` per rank (recv: size * bytes, in rank order), and the uniform all-to-all of
// `bytes_per_peer` (send and recv: size * bytes_per_peer), over a communicator of `size` ranks.
HostCollective allgather_op(const void* send, size_t bytes, void* recv, int size);
HostCollective alltoall_op(const void* send, size_t bytes_per_peer, void* recv, int size);

// collective_to_host of allgather_op over all of `comm`.
void allgather_to_host(ncclComm_t comm, int device, const void* send, size_t bytes, void* recv, const std::string& step,
                       const std::string& where, const detail::Deadline& deadline);

// The uniform all-to-all of `bytes_per_peer` bytes per peer: ncclAlltoAll (NCCL 2.28+), else grouped
// ncclSend/ncclRecv. Enqueues only (the executor's exchange and alltoall_op).
void alltoall_bytes(const void* send, void* recv, size_t bytes_per_peer, ncclComm_t comm, cudaStream_t stream);

// The CUDA device current on this thread, or a BASP_ERROR_CUDA naming the reason there is none ("no CUDA-capable
// device is detected", "CUDA driver version is insufficient", ...). `what` names the feature that needed it.
int require_device(const char* what);

// Makes `device` current for the scope and restores the previous device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

// cudaMalloc'd bytes, freed with the owner. Zero-filled at allocation so that the first execute touches no
// fresh pages.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes);
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  std::byte* get() const { return ptr_; }
  int64_t bytes() const { return bytes_; }

 private:
  void release() noexcept;

  std::byte* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace basp::transport::nccl
