#include "transport/nccl/chunk_streams.h"

#include <chrono>
#include <thread>

#include "common/cuda_check.h"
#include "common/error.h"

namespace basp::transport::nccl {

ChunkStreams::ChunkStreams(int32_t max_chunks)
    : max_chunks_(max_chunks), slots_(static_cast<size_t>(2 * (max_chunks > 0 ? max_chunks : 0))) {
  try {
    BASP_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    BASP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    for (Slot& s : slots_) BASP_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  } catch (const detail::Error&) {
    release();  // what was made so far
    throw;
  }
}

ChunkStreams::~ChunkStreams() { release(); }

void ChunkStreams::release() noexcept {
  for (Slot& s : slots_) {
    if (s.done != nullptr) cudaEventDestroy(s.done);
    s.done = nullptr;
  }
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (side_ != nullptr) cudaStreamDestroy(side_);
  ready_ = nullptr;
  side_ = nullptr;
  cudaGetLastError();
}

ChunkStreams::Slot& ChunkStreams::slot(Direction direction, int32_t chunk) {
  BASP_CHECK(chunk >= 0 && chunk < max_chunks_, BASP_ERROR_INTERNAL, "head chunk ", chunk, " has no slot (",
             max_chunks_, " per direction)");
  return slots_[static_cast<size_t>((direction == Direction::kScatter ? 0 : max_chunks_) + chunk)];
}

cudaStream_t ChunkStreams::begin(cudaStream_t caller) {
  BASP_CUDA_CHECK(cudaEventRecord(ready_, caller));
  BASP_CUDA_CHECK(cudaStreamWaitEvent(side_, ready_, 0));
  return side_;
}

void ChunkStreams::rejoin(cudaStream_t caller) noexcept {
  if (cudaEventRecord(ready_, side_) == cudaSuccess) cudaStreamWaitEvent(caller, ready_, 0);
  cudaGetLastError();
}

void ChunkStreams::end(Direction direction, int32_t chunk, cudaStream_t caller) {
  Slot& s = slot(direction, chunk);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BASP_CUDA_CHECK(cudaStreamIsCapturing(caller, &capture));
  BASP_CUDA_CHECK(cudaEventRecord(s.done, side_));
  s.caller = caller;
  s.captured = capture != cudaStreamCaptureStatusNone;
  s.started = true;
}

bool ChunkStreams::test(Direction direction, int32_t chunk) {
  const Slot& s = slot(direction, chunk);
  if (s.captured) return true;
  const cudaError_t state = cudaEventQuery(s.done);
  if (state == cudaErrorNotReady) return false;
  if (state != cudaSuccess) {
    cudaGetLastError();
    detail::fail_cuda(state, "the head chunk's exchange on the device");
  }
  return true;
}

void ChunkStreams::wait(Direction direction, int32_t chunk) {
  Slot& s = slot(direction, chunk);
  s.started = false;
  BASP_CUDA_CHECK(cudaStreamWaitEvent(s.caller, s.done, 0));
}

bool ChunkStreams::drain(const detail::Deadline& deadline) {
  cudaError_t first = cudaSuccess;  // the first device error among the chunks: an exchange that failed has ended
  for (;;) {
    bool pending = false;
    for (Slot& s : slots_) {
      if (!s.started || s.captured) continue;
      const cudaError_t state = cudaEventQuery(s.done);
      if (state == cudaErrorNotReady) {
        pending = true;
        continue;
      }
      if (state != cudaSuccess) {
        cudaGetLastError();
        if (first == cudaSuccess) first = state;
      }
      s.started = false;  // ended: not queried again
    }
    if (!pending || deadline.expired()) {
      for (Slot& s : slots_) s.started = false;
      if (!pending && first != cudaSuccess) detail::fail_cuda(first, "a head chunk's exchange on the device");
      return !pending;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace basp::transport::nccl
