// CUDA runtime failures as BASP_ERROR_CUDA with CUDA's own name and string. Only for code built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "common/error.h"

namespace basp::detail {

// Throws BASP_ERROR_CUDA for `rc`, after clearing the error so that it does not stick to the caller's next
// CUDA call (a sticky error, such as a faulting kernel, stays: nothing can clear it).
[[noreturn]] inline void fail_cuda(cudaError_t rc, const char* call) {
  cudaGetLastError();
  fail(BASP_ERROR_CUDA, call, " failed: ", cudaGetErrorName(rc), ": ", cudaGetErrorString(rc));
}

}  // namespace basp::detail

#define BASP_CUDA_CHECK(call)                                                          \
  do {                                                                                 \
    const cudaError_t basp_cuda_rc_ = (call);                                          \
    if (basp_cuda_rc_ != cudaSuccess) ::basp::detail::fail_cuda(basp_cuda_rc_, #call); \
  } while (0)
