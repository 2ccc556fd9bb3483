#include "runtime/pointer_check.h"

#include "common/env.h"
#include "common/error.h"

#if BASP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace basp::runtime {

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host memory";
    case MemoryKind::kDevice: return "device memory";
    case MemoryKind::kManaged: return "managed memory";
  }
  return "unknown memory";
}

MemoryKind memory_kind(const void* ptr) {
#if BASP_HAVE_CUDA
  cudaPointerAttributes attributes{};
  // A pure query, but executes may be captured in a CUDA graph under the strict (global) capture mode: ask in
  // relaxed mode so that the query can never invalidate the caller's capture, then restore the caller's mode.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  const cudaError_t rc = cudaPointerGetAttributes(&attributes, ptr);
  if (exchanged) cudaThreadExchangeStreamCaptureMode(&mode);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // the failure must not stick to the caller's next CUDA call
    // No driver or no GPU: nothing can be device memory.
    if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || rc == cudaErrorInitializationError ||
        rc == cudaErrorStubLibrary || rc == cudaErrorDevicesUnavailable || rc == cudaErrorSystemDriverMismatch ||
        rc == cudaErrorCompatNotSupportedOnDevice) {
      return MemoryKind::kHost;
    }
    detail::fail(BASP_ERROR_CUDA, "cudaPointerGetAttributes(", ptr, ") failed: ", cudaGetErrorString(rc));
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice: return MemoryKind::kDevice;
    case cudaMemoryTypeManaged: return MemoryKind::kManaged;
    default: return MemoryKind::kHost;  // unregistered or pinned host memory
  }
#else
  (void)ptr;
  return MemoryKind::kHost;
#endif
}

void check_memory_kind(const transport::ExecuteNeeds& needs, const char* op, const char* name, int index,
                       const void* ptr) {
  const MemoryKind kind = memory_kind(ptr);
  if (needs.device_memory) {
    BASP_CHECK_ARG(kind != MemoryKind::kHost, op, ": ", name, "[", index, "] (", ptr, ") is ", memory_kind_name(kind),
                   ": the ", needs.backend, " backend needs device memory");
  } else {
    BASP_CHECK_ARG(kind != MemoryKind::kDevice, op, ": ", name, "[", index, "] (", ptr, ") is ", memory_kind_name(kind),
                   ": the ", needs.backend, " backend needs host memory");
  }
}

bool pointer_checks_enabled() { return env::get_bool("BASP_CHECK_POINTERS"); }

}  // namespace basp::runtime
