// NCCL helpers: a checked-call macro that turns an NCCL result into BASP_ERROR_NCCL with NCCL's error string
// and its last-error detail, a device buffer owner, and a scoped switch of the current CUDA device.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/error.h"

namespace basp::transport::nccl {

// "<ncclGetErrorString>: <ncclGetLastError>" (the second part when NCCL has one).
std::string error_string(ncclResult_t rc);

#define BASP_NCCL_CHECK(call)                                                                              \
  do {                                                                                                     \
    const ncclResult_t basp_nccl_rc_ = (call);                                                             \
    if (basp_nccl_rc_ != ncclSuccess) {                                                                    \
      ::basp::detail::fail(BASP_ERROR_NCCL, #call, " failed: ",                                           \
                           ::basp::transport::nccl::error_string(basp_nccl_rc_));                         \
    }                                                                                                      \
  } while (0)

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
