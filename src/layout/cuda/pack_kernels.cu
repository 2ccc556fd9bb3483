// The device pack/unpack kernel: a grid-stride loop over the tiles of layout/row_copy.h. All index math lives in
// the BASP_HOST_DEVICE functions that the CPU unit tests run; this file only launches them.
#include "layout/cuda/pack_kernels.h"

#include <algorithm>
#include <array>
#include <atomic>

namespace basp::layout::cuda {
namespace {

// Build-time knob (docs/gpu.md, "Tuning"): the CTAs per SM the register allocation must allow (0: no bound, the
// kernel as measured).
#ifndef BASP_COPY_MIN_BLOCKS
#define BASP_COPY_MIN_BLOCKS 0
#endif
#if BASP_COPY_MIN_BLOCKS > 0
#define BASP_COPY_BOUNDS __launch_bounds__(kCopyThreads, BASP_COPY_MIN_BLOCKS)
#else
#define BASP_COPY_BOUNDS __launch_bounds__(kCopyThreads)
#endif

__global__ void BASP_COPY_BOUNDS row_copy_kernel(const RowCopyArgs args) {
  if (args.skip != nullptr && *args.skip != 0) return;
  for (int64_t tile = blockIdx.x; tile < args.num_tiles; tile += gridDim.x) {
    copy_tile(args, tile, static_cast<int32_t>(threadIdx.x));
  }
}

constexpr int kSumThreads = 64;  // threads per (row, head) task: the head's elements, strided

__global__ void __launch_bounds__(kSumThreads) sum_unpack_kernel(const SumUnpackArgs args) {
  if (args.skip != nullptr && *args.skip != 0) return;
  const int64_t tasks = args.num_tasks();
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    sum_unpack_task(args, task, static_cast<int32_t>(threadIdx.x), kSumThreads);
  }
}

__global__ void write_tag_kernel(ExchangeTag* dst, ExchangeTag tag) { *dst = tag; }

__global__ void check_tags_kernel(const ExchangeTag* received, int32_t count, int32_t self, ExchangeTag expected,
                                  uint32_t* skip, TagReport* report) {
  uint32_t wrong = 0;
  for (int32_t p = 0; p < count; ++p) {
    if (p == self) continue;
    const ExchangeTag t = received[p];
    if (t.fingerprint == expected.fingerprint && t.batch_id == expected.batch_id && t.documents == expected.documents &&
        t.call == expected.call) {
      continue;
    }
    wrong = 1;
    if (report->found == 0) {
      report->position = p;
      report->batch_id = expected.batch_id;
      report->seen = t;
      report->expected = expected;
      __threadfence_system();
      report->found = 1;
    }
    break;
  }
  *skip = wrong;
}

// One wave of resident CTAs: the grid-stride loop then spreads the tiles evenly, with no partial last wave.
// Cached per device (the occupancy query is not free and the answer never changes).
cudaError_t resident_blocks(int device, int* blocks) {
  static std::array<std::atomic<int>, 64> cache{};
  if (device >= 0 && device < static_cast<int>(cache.size())) {
    *blocks = cache[static_cast<size_t>(device)].load(std::memory_order_relaxed);
    if (*blocks > 0) return cudaSuccess;
  }
  int sms = 0;
  cudaError_t rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (rc != cudaSuccess) return rc;
  int per_sm = 0;
  rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, row_copy_kernel, kCopyThreads, 0);
  if (rc != cudaSuccess) return rc;
  *blocks = std::max(1, sms * per_sm);
  if (device >= 0 && device < static_cast<int>(cache.size())) {
    cache[static_cast<size_t>(device)].store(*blocks, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t prepare_row_copy() {
  int device = 0;
  const cudaError_t rc = cudaGetDevice(&device);
  if (rc != cudaSuccess) return rc;
  int resident = 0;
  return resident_blocks(device, &resident);
}

cudaError_t launch_row_copy(const RowCopyArgs& args, cudaStream_t stream) {
  if (args.num_tiles == 0) return cudaSuccess;
  int device = 0;
  cudaError_t rc = cudaGetDevice(&device);
  if (rc != cudaSuccess) return rc;
  int resident = 0;
  rc = resident_blocks(device, &resident);
  if (rc != cudaSuccess) return rc;
  const int64_t blocks = std::min<int64_t>(args.num_tiles, resident);
  row_copy_kernel<<<static_cast<unsigned>(blocks), kCopyThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launch_scatter_pack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* const* seq,
                                void* wire, cudaStream_t stream) {
  return launch_row_copy(make_row_copy_args(g, n, ws, TensorSide::kSeq, true, seq, wire), stream);
}

cudaError_t launch_scatter_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                  void* const* head, cudaStream_t stream, const uint32_t* skip) {
  RowCopyArgs args = make_row_copy_args(g, n, ws, TensorSide::kHead, false, head, wire);
  args.skip = skip;
  return launch_row_copy(args, stream);
}

cudaError_t launch_gather_pack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* const* head,
                               void* wire, cudaStream_t stream) {
  return launch_row_copy(make_row_copy_args(g, n, ws, TensorSide::kHead, true, head, wire), stream);
}

cudaError_t launch_gather_unpack(const Geometry* g, int32_t n, const PackedWorkspace& ws, const void* wire,
                                 void* const* seq, cudaStream_t stream, const uint32_t* skip) {
  RowCopyArgs args = make_row_copy_args(g, n, ws, TensorSide::kSeq, false, seq, wire);
  args.skip = skip;
  return launch_row_copy(args, stream);
}

cudaError_t launch_sum_unpack(const SumUnpackArgs& args, cudaStream_t stream) {
  const int64_t tasks = args.num_tasks();
  if (tasks == 0) return cudaSuccess;
  int device = 0;
  cudaError_t rc = cudaGetDevice(&device);
  if (rc != cudaSuccess) return rc;
  int sms = 0;
  rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (rc != cudaSuccess) return rc;
  const int64_t blocks = std::min<int64_t>(tasks, static_cast<int64_t>(sms) * 16);
  sum_unpack_kernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launch_write_tag(ExchangeTag* dst, ExchangeTag tag, cudaStream_t stream) {
  write_tag_kernel<<<1, 1, 0, stream>>>(dst, tag);
  return cudaGetLastError();
}

cudaError_t launch_check_tags(const ExchangeTag* received, int32_t count, int32_t self, ExchangeTag expected,
                              uint32_t* skip, TagReport* report, cudaStream_t stream) {
  check_tags_kernel<<<1, 1, 0, stream>>>(received, count, self, expected, skip, report);
  return cudaGetLastError();
}

}  // namespace basp::layout::cuda
