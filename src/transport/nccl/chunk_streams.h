// What a plan of the NCCL backend needs to run split-phase head chunks ordered by the device (transport.h,
// StreamChunks): a side stream of the plan, an event that orders it after the caller's stream, and one completion
// event per (direction, chunk). Made with the plan's executor, so that a start creates and allocates nothing.
//
// A start records `ready` on the caller's stream and makes the side stream wait for it, the exchange is enqueued on
// the side stream, and the chunk's event is recorded after it; a test queries that event; a wait makes the
// caller's stream wait for it (cudaStreamWaitEvent). In a CUDA graph capture the same calls fork the side stream
// into the capture and join it back at the wait: a chunk started in a capture is never queried (its test says 1:
// it runs when the graph is launched) and must be waited for before the capture ends.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/deadline.h"
#include "common/direction.h"

namespace basp::transport::nccl {

class ChunkStreams {
 public:
  // On the current device: the side stream and 1 + 2 * max_chunks events.
  explicit ChunkStreams(int32_t max_chunks);
  // The side stream and the events are released once the work enqueued on them has ended (CUDA defers it).
  ~ChunkStreams();
  ChunkStreams(const ChunkStreams&) = delete;
  ChunkStreams& operator=(const ChunkStreams&) = delete;

  // Orders the side stream after the work enqueued on `caller` so far and returns it, for the chunk's exchange.
  cudaStream_t begin(cudaStream_t caller);
  // After a failed enqueue: orders `caller` after the side stream again (joins a capture begin() forked), without
  // throwing.
  void rejoin(cudaStream_t caller) noexcept;
  // After the chunk's exchange is enqueued on the side stream: records its end.
  void end(Direction direction, int32_t chunk, cudaStream_t caller);
  bool test(Direction direction, int32_t chunk);
  void wait(Direction direction, int32_t chunk);
  // Polls the started chunks' events until they have all ended (true) or `deadline` (false); frees them. Throws the
  // first device error a chunk ended with (once all have ended).
  bool drain(const detail::Deadline& deadline);

 private:
  struct Slot {
    cudaEvent_t done = nullptr;
    cudaStream_t caller = nullptr;  // the stream the start took, which the wait orders
    bool started = false;           // started and not waited for
    bool captured = false;          // started in a CUDA graph capture: never queried
  };
  Slot& slot(Direction direction, int32_t chunk);
  void release() noexcept;

  int32_t max_chunks_ = 0;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<Slot> slots_;  // scatter chunks, then gather chunks
};

}  // namespace basp::transport::nccl
