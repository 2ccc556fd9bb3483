// Where a buffer lives, as the transports need to know it: the MPI backend reads host memory, the NCCL backend
// device memory. Asked with cudaPointerGetAttributes when the library is built with CUDA; a build without CUDA,
// a machine without a driver or without a device sees host memory everywhere.
#pragma once

#include "basp/basp.h"

namespace basp::transport {

enum class MemoryKind {
  kHost,     // ordinary or pinned host memory
  kDevice,   // cudaMalloc'd device memory
  kManaged,  // cudaMallocManaged: reachable from both sides
};

const char* memory_kind_name(MemoryKind kind);

// The kind of memory `ptr` points into. Throws BASP_ERROR_CUDA only for a CUDA failure other than "no driver" or
// "no device".
MemoryKind memory_kind(const void* ptr);

// Checks that `ptr` (named `name`, index `index`, in operation `op`) suits `backend`: host or managed memory for
// MPI, device or managed memory for NCCL. Throws BASP_ERROR_INVALID_ARGUMENT naming the argument otherwise.
void check_memory_kind(basp_backend_t backend, const char* op, const char* name, int index, const void* ptr);

}  // namespace basp::transport
