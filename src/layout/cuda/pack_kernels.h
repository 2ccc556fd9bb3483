// Host entry points of the device pack/unpack kernels (layout/cuda/pack_kernels.cu). One call = one kernel
// launch that moves the rows of every tensor of an exchange (see layout/row_copy.h for the four directions).
#pragma once

#include <cuda_runtime_api.h>

#include "layout/row_copy.h"

namespace basp::layout::cuda {

// Loads the kernel and sizes its grid for the current device, so that the first launch (possibly inside a CUDA
// graph capture) does nothing but launch. Executors call it once when a plan is created.
cudaError_t prepare_row_copy();

// Enqueues the copy described by `args` on `stream` (nothing when it has no rows). Returns the launch error, if
// any; never synchronises and never allocates, so it may be captured in a CUDA graph.
cudaError_t launch_row_copy(const RowCopyArgs& args, cudaStream_t stream);

// The four movements of one exchange, for the executors: tensors[t] is the tensor side, `wire` the packed
// workspace. Each is one launch covering all n tensors.
cudaError_t launch_scatter_pack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* const* seq,
                                void* wire, cudaStream_t stream);
cudaError_t launch_scatter_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                  void* const* head, cudaStream_t stream);
cudaError_t launch_gather_pack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* const* head,
                               void* wire, cudaStream_t stream);
cudaError_t launch_gather_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                 void* const* seq, cudaStream_t stream);

// The summing gather's unpack of one tensor (layout/row_copy.h, SumUnpackArgs): one task per (row, head).
cudaError_t launch_sum_unpack(const SumUnpackArgs& args, cudaStream_t stream);

}  // namespace basp::layout::cuda
