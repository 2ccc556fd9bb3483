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
// The unpacks take an optional device word `skip` (RowCopyArgs::skip): nonzero when the kernel runs, nothing is
// written.
cudaError_t launch_scatter_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                  void* const* head, cudaStream_t stream, const uint32_t* skip = nullptr);
cudaError_t launch_gather_pack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* const* head,
                               void* wire, cudaStream_t stream);
cudaError_t launch_gather_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                 void* const* seq, cudaStream_t stream, const uint32_t* skip = nullptr);

// The summing gather's unpack of one tensor (layout/row_copy.h, SumUnpackArgs): one task per (row, head).
cudaError_t launch_sum_unpack(const SumUnpackArgs& args, cudaStream_t stream);

// The tag a batch plan's exchange sends every peer ahead of its data (docs/batch.md): what the ranks of a group
// must agree on. A fixed 32 bytes, so that a peer's tag is always the same size whatever plan it belongs to.
struct ExchangeTag {
  uint64_t fingerprint = 0;  // of the batch description
  int64_t batch_id = 0;      // the plan's place among the comm's batch plans
  uint64_t documents = 0;    // of the document boundaries set on the plan (a THD batch plan starts with its
                             // description's; 0: none set)
  int64_t call = 0;          // 2 * (the plan's executes enqueued before this one) + 1 for a scatter, + 0 for a
                             // gather; fixed in a captured CUDA graph, whose replays send the same value
};
static_assert(sizeof(ExchangeTag) == 32, "the tag travels as 32 bytes");

// What the tag check found, in host memory the device writes (cudaHostAllocMapped): `found` is set once, by the
// first check that saw a wrong tag, and names the position that sent it.
struct TagReport {
  uint32_t found = 0;
  int32_t position = -1;  // the sender's position in its group
  int64_t batch_id = 0;   // the expected batch id (the plan's)
  ExchangeTag seen;       // what it sent
  ExchangeTag expected;   // what this rank expected
};
static_assert(sizeof(TagReport) == 80, "docs/batch.md gives its size");

// Writes `tag` to `dst` (one thread): an execute's outgoing tag, with no host memory involved, so that it can be
// captured in a CUDA graph.
cudaError_t launch_write_tag(ExchangeTag* dst, ExchangeTag tag, cudaStream_t stream);

// Compares the `count` tags that arrived (position p's at received[p]; `self`'s own slot is not read) with
// `expected`. Sets *skip to 1 when one differs (else 0), and records the first difference in *report.
cudaError_t launch_check_tags(const ExchangeTag* received, int32_t count, int32_t self, ExchangeTag expected,
                              uint32_t* skip, TagReport* report, cudaStream_t stream);

}  // namespace basp::layout::cuda
