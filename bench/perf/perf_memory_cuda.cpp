// Device memory and one stream for the NCCL backend. Built with the CUDA runtime when the toolkit is found
// (BASP_PERF_HAVE_CUDA); otherwise asking for it is a clear error at run time.
#include <stdexcept>
#include <string>

#include "perf_memory.h"

#if BASP_PERF_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace basp::bench {

#if BASP_PERF_HAVE_CUDA
namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky error so later calls report their own
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

class CudaMemory final : public MemoryContext {
 public:
  explicit CudaMemory(int local_rank) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
      (void)cudaGetLastError();
      throw std::runtime_error(std::string("--backend nccl: no usable CUDA device (cudaGetDeviceCount: ") +
                               (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")");
    }
    cuda_check(cudaSetDevice(local_rank % count), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    release_graph();
    if (stream_) cudaStreamDestroy(stream_);
  }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
    return p;
  }
  void release(void* ptr) noexcept override { cudaFree(ptr); }
  bool host_accessible() const override { return false; }
  void copy_to_buffer(void* dst, const void* host, size_t bytes) override {
    cuda_check(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    cuda_check(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void fill(void* dst, unsigned char value, size_t bytes) override {
    cuda_check(cudaMemset(dst, value, bytes), "cudaMemset");
  }
  void* stream() override { return stream_; }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void capture_graph(const std::function<void()>& body) override {
    release_graph();
    cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      body();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream_, &partial);
      if (partial) cudaGraphDestroy(partial);
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream_, &graph_), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  void launch_graph() override { cuda_check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }
  void release_graph() noexcept override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<MemoryContext> make_cuda_memory(int local_rank) { return std::make_unique<CudaMemory>(local_rank); }

#else

std::unique_ptr<MemoryContext> make_cuda_memory(int) {
  throw std::runtime_error("--backend nccl: this benchmark was built without the CUDA toolkit (BASP_ENABLE_CUDA)");
}

#endif

}  // namespace basp::bench
