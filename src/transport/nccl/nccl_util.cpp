#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

std::string error_string(ncclResult_t rc) {
  std::string out = ncclGetErrorString(rc);
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') out += std::string(": ") + detail;
  return out;
}

int require_device(const char* what) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    detail::fail(BASP_ERROR_CUDA, what, " needs a CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorName(rc),
                 ": ", cudaGetErrorString(rc));
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
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "device workspace of ", bytes, " bytes: cudaMalloc failed: ",
                 cudaGetErrorString(rc));
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
