// Where the perf binaries' tensors live and how calls are ordered: host memory for the MPI backend, device
// memory and one CUDA stream for the NCCL backend. The driver talks only to this interface, so the timing loop,
// the check and the table are the same code for both backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace basp::bench {

class MemoryContext {
 public:
  virtual ~MemoryContext() = default;
  // Zero-filled (pages are touched now, not in the first timed iteration). Throws on failure.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  // Whether the host can read and write buffers directly (then the copies below are never needed).
  virtual bool host_accessible() const = 0;
  virtual void copy_to_buffer(void* dst, const void* host, size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;
  virtual void fill(void* dst, unsigned char value, size_t bytes) = 0;
  // The stream argument of basp_scatter/basp_gather: NULL on the MPI backend.
  virtual void* stream() = 0;
  // Waits for everything issued on the stream.
  virtual void synchronize() = 0;
  // CUDA graphs (NCCL backend): record `body` once, then replay it. Throws where graphs do not apply.
  virtual void capture_graph(const std::function<void()>& body) = 0;
  virtual void launch_graph() = 0;
  virtual void release_graph() noexcept = 0;
};

std::unique_ptr<MemoryContext> make_host_memory();
// Device `local_rank % device count`. Throws when this benchmark was built without CUDA or no device is visible.
std::unique_ptr<MemoryContext> make_cuda_memory(int local_rank);

// A buffer owned by a context.
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryContext& ctx, size_t bytes) : ctx_(&ctx), ptr_(ctx.allocate(bytes)), bytes_(bytes) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ctx_(o.ctx_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ctx_ = o.ctx_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  ~Buffer() { reset(); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void reset() noexcept {
    if (ptr_) ctx_->release(ptr_);
    ptr_ = nullptr;
  }
  MemoryContext* ctx_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace basp::bench
