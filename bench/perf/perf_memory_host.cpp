// Host memory for the MPI backend. Calls complete before they return, so there is nothing to synchronise.
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "perf_memory.h"

namespace basp::bench {
namespace {

class HostMemory final : public MemoryContext {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw std::runtime_error("host allocation of " + std::to_string(bytes) + " bytes failed");
    std::memset(p, 0, rounded);
    return p;
  }
  void release(void* ptr) noexcept override { std::free(ptr); }
  bool host_accessible() const override { return true; }
  void copy_to_buffer(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void copy_to_host(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes); }
  void fill(void* dst, unsigned char value, size_t bytes) override { std::memset(dst, value, bytes); }
  void* stream() override { return nullptr; }
  void synchronize() override {}
  void capture_graph(const std::function<void()>&) override {
    throw std::runtime_error("CUDA graphs are not applicable to the MPI backend");
  }
  void launch_graph() override { throw std::runtime_error("CUDA graphs are not applicable to the MPI backend"); }
  void release_graph() noexcept override {}
};

}  // namespace

std::unique_ptr<MemoryContext> make_host_memory() { return std::make_unique<HostMemory>(); }

}  // namespace basp::bench
