// Helpers of the GPU test programs: plain main()s (no Catch2, no MPI) that return 0 (passed), 1 (failed) or 77
// (skipped: CTest's SKIP_RETURN_CODE), so that a machine without a GPU reports them skipped, never passed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace basp::test {

constexpr int kSkipped = 77;

// True when a CUDA device is usable; otherwise prints why this program is skipped.
inline bool have_device(const char* program) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::printf("%s: skipped: no CUDA device (%s)\n", program,
                rc != cudaSuccess ? cudaGetErrorString(rc) : "no device visible");
    return false;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s: device 0: %s, sm_%d%d, %d SMs\n", program, prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  return true;
}

// A CUDA failure in the test harness itself: fatal.
#define TEST_CUDA(call)                                                                              \
  do {                                                                                               \
    const cudaError_t test_rc_ = (call);                                                             \
    if (test_rc_ != cudaSuccess) {                                                                   \
      std::printf("FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(test_rc_)); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

// Device bytes whose usable part starts `shift` bytes after a 256-byte boundary.
class DeviceBytes {
 public:
  DeviceBytes(int64_t bytes, int64_t shift = 0) : bytes_(bytes) {
    TEST_CUDA(cudaMalloc(&base_, static_cast<size_t>(bytes + shift + 256)));
    data_ = static_cast<std::byte*>(base_) + shift;
  }
  ~DeviceBytes() { cudaFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  DeviceBytes(DeviceBytes&& o) noexcept : base_(o.base_), data_(o.data_), bytes_(o.bytes_) { o.base_ = nullptr; }

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  void fill(uint8_t value) const { TEST_CUDA(cudaMemset(data_, value, static_cast<size_t>(bytes_))); }
  void upload(const std::vector<std::byte>& v) const {
    TEST_CUDA(cudaMemcpy(data_, v.data(), v.size(), cudaMemcpyHostToDevice));
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> v(static_cast<size_t>(bytes_));
    TEST_CUDA(cudaMemcpy(v.data(), data_, v.size(), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  void* base_ = nullptr;
  std::byte* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Counts checks and failures; prints the first few failures.
struct Tally {
  int64_t checks = 0;
  int64_t failures = 0;
  bool check(bool ok, const char* what) {
    ++checks;
    if (!ok) {
      ++failures;
      if (failures <= 20) std::printf("FAILED: %s\n", what);
    }
    return ok;
  }
  int finish(const char* program) const {
    std::printf("%s: %lld checks, %lld failed: %s\n", program, static_cast<long long>(checks),
                static_cast<long long>(failures), failures == 0 && checks > 0 ? "PASSED" : "FAILED");
    return failures == 0 && checks > 0 ? 0 : 1;
  }
};

inline void fill_random_bytes(std::vector<std::byte>& v, std::mt19937_64& rng) {
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
}

// Index of the first differing byte, or -1.
inline int64_t first_difference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace basp::test
