// The per-call check that an execute's buffers are memory its backend can reach: the MPI backend reads host
// memory, the NCCL backend device memory. Asked with cudaPointerGetAttributes when the library is built with CUDA;
// a build without CUDA, a machine without a driver or without a device sees host memory everywhere. The query
// costs a driver call per pointer, so a plan asks only for pointers it has not seen pass (runtime/plan.h), and
// BASP_CHECK_POINTERS=0 turns the check off.
#pragma once

#include "basp/basp.h"
#include "transport/transport.h"

namespace basp::runtime {

enum class MemoryKind {
  kHost,     // ordinary or pinned host memory
  kDevice,   // cudaMalloc'd device memory
  kManaged,  // cudaMallocManaged: reachable from both sides
};

const char* memory_kind_name(MemoryKind kind);

// The kind of memory `ptr` points into. Throws BASP_ERROR_CUDA only for a CUDA failure other than "no driver" or
// "no device".
MemoryKind memory_kind(const void* ptr);

// Checks that `ptr` (named `name`, index `index`, in operation `op`) suits an executor that `needs` device memory
// (device or managed memory) or host memory (host or managed memory). Throws BASP_ERROR_INVALID_ARGUMENT naming the
// argument otherwise.
void check_memory_kind(const transport::ExecuteNeeds& needs, const char* op, const char* name, int index,
                       const void* ptr);

// BASP_CHECK_POINTERS: unset or "1" checks, "0" does not; anything else is an argument error naming the variable.
bool pointer_checks_enabled();

}  // namespace basp::runtime
