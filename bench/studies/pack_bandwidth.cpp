// Bandwidth of the device pack/unpack kernel against cudaMemcpyAsync device-to-device on the same bytes.
//
// For each size (bytes of one sequence-sharded tensor), layout and group size K, four movements are timed, each
// one kernel launch: scatter pack (sequence-sharded -> packed chunks), scatter unpack (packed -> head-sharded),
// gather pack (head-sharded -> packed) and gather unpack (packed -> sequence-sharded). Every one reads and writes
// `size` bytes, as does the copy it is compared with; bandwidth counts bytes read + written per second. Each
// figure is the median of -n timed runs (CUDA events around each run) after -w warm-up runs. The shape is
// H = 32 heads of D = 128, 2-byte elements, 2 local sequences; tokens per rank follow from the size.
//
//   basp_pack_bandwidth [-b 256M] [-e 1G] [-f 4] [-n 20] [-w 5] [-k 8[,4,...]] [-c 1] [-J file.json]
// Returns 77 (skipped) without a CUDA device, 1 when the round-trip check fails.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layout/cuda/pack_kernels.h"
#include "layout/geometry.h"
#include "layout/packed_workspace.h"
#include "study.h"

namespace {

using basp::bench::StudyOptions;

constexpr int kSkipped = 77;
constexpr int64_t kHeads = 32;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kElem = 2;
constexpr int64_t kLocalSequences = 2;
constexpr double kTarget = 0.90;

#define BENCH_CUDA(call)                                                                                 \
  do {                                                                                                   \
    const cudaError_t bench_rc_ = (call);                                                                \
    if (bench_rc_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(bench_rc_)); \
      std::exit(1);                                                                                      \
    }                                                                                                    \
  } while (0)

struct Options {
  int64_t min_bytes = int64_t{256} << 20;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t factor = 4;
  int iters = 20;
  int warmup = 5;
  std::vector<int64_t> ks{8};
  bool check = true;
  std::string json;
};

constexpr const char* kUsage =
    "usage: basp_pack_bandwidth [-b 256M] [-e 1G] [-f 4] [-n >=20] [-w 5] [-k 8[,4,...]] [-c 0|1] [-J file]\n"
    "  -b <size>   smallest tensor (K/M/G suffixes), default 256M\n"
    "  -e <size>   largest tensor, default 1G\n"
    "  -f <n>      factor between sizes, default 4\n"
    "  -n <n>      timed runs per figure (at least 20), default 20\n"
    "  -w <n>      warm-up runs, default 5\n"
    "  -k <list>   group sizes, each dividing the 32 heads, default 8\n"
    "  -c <0|1>    check the pack/unpack round trip, default 1\n"
    "  -J <file>   also write the results as JSON\n";

// The command line into `o`.
StudyOptions bandwidth_options(Options& o) {
  using basp::bench::ArgError;
  using basp::bench::parse_int;
  StudyOptions options(kUsage);
  options.value("-b", [&](const std::string& v) { o.min_bytes = basp::bench::parse_size(v, "-b"); })
      .value("-e", [&](const std::string& v) { o.max_bytes = basp::bench::parse_size(v, "-e"); })
      .value("-f", [&](const std::string& v) { o.factor = parse_int(v, "-f", 2, 1024); })
      .value("-n", [&](const std::string& v) { o.iters = static_cast<int>(parse_int(v, "-n", 20, 100000)); })
      .value("-w", [&](const std::string& v) { o.warmup = static_cast<int>(parse_int(v, "-w", 0, 100000)); })
      .value("-c", [&](const std::string& v) { o.check = parse_int(v, "-c", 0, 1) == 1; })
      .value("-k",
             [&](const std::string& v) {
               o.ks = basp::bench::parse_int_list(v, "-k", 1, kHeads);
               for (int64_t k : o.ks) {
                 if (kHeads % k != 0)
                   throw ArgError("-k ('" + v + "'): " + std::to_string(k) + " does not divide the " +
                                  std::to_string(kHeads) + " heads");
               }
             })
      .value("-J", [&](const std::string& v) { o.json = v; });
  return options;
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(int64_t bytes) { BENCH_CUDA(cudaMalloc(&p, static_cast<size_t>(bytes))); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(p); }
};

// Median milliseconds of `iters` runs of `op` on `stream`, after `warmup` runs.
template <typename Op>
double median_ms(const Options& o, cudaStream_t stream, Op op) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < o.warmup; ++i) op();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> ms(static_cast<size_t>(o.iters));
  for (int i = 0; i < o.iters; ++i) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    op();
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    BENCH_CUDA(cudaEventElapsedTime(&ms[static_cast<size_t>(i)], start, stop));
  }
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return basp::bench::median(std::vector<double>(ms.begin(), ms.end()));
}

double gbps(int64_t bytes, double ms) { return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9; }

int run(const Options& o) {
  if (o.min_bytes > o.max_bytes)
    throw basp::bench::ArgError("-b (" + std::to_string(o.min_bytes) + ") is larger than -e (" +
                                std::to_string(o.max_bytes) + ")");
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::printf("# basp_pack_bandwidth: skipped: no CUDA device (%s)\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "none visible");
    return kSkipped;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# basp_pack_bandwidth: device pack/unpack vs cudaMemcpyAsync D2D on %s (sm_%d%d, %d SMs)\n", prop.name,
              prop.major, prop.minor, prop.multiProcessorCount);
  std::printf(
      "# H %lld, D %lld, %lld-byte elements, b_loc %lld; median of %d runs after %d warm-up; GB/s = (read + "
      "written) / time\n",
      static_cast<long long>(kHeads), static_cast<long long>(kHeadDim), static_cast<long long>(kElem),
      static_cast<long long>(kLocalSequences), o.iters, o.warmup);
  std::printf("#%13s %6s %3s %-15s %10s %9s %12s %8s\n", "size(B)", "layout", "K", "op", "time(us)", "GB/s",
              "memcpy GB/s", "%memcpy");
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
  if (json)
    std::fprintf(json, "{\"device\": \"%s\", \"iters\": %d, \"warmup\": %d, \"results\": [\n", prop.name, o.iters,
                 o.warmup);
  bool first_json = true;
  double worst = 1e9;
  int below = 0;
  int failed_checks = 0;

  for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const int64_t token_bytes = kHeads * kHeadDim * kElem;
    const int64_t tokens = size / token_bytes / kLocalSequences * kLocalSequences;
    const int64_t bytes = tokens * token_bytes;
    Buffer seq(bytes), head(bytes), back(bytes), wire(bytes), copy(bytes);
    {
      // Arbitrary nonzero content (a cheap function of the offset), so the round-trip check means something.
      std::vector<uint64_t> host(static_cast<size_t>(bytes / 8));
      for (size_t i = 0; i < host.size(); ++i) host[i] = (i + 1) * 0x9e3779b97f4a7c15ull;
      BENCH_CUDA(cudaMemcpy(seq.get(), host.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
    }
    const double copy_ms = median_ms(o, stream, [&] {
      BENCH_CUDA(cudaMemcpyAsync(copy.get(), seq.get(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream));
    });
    const double copy_gbps = gbps(bytes, copy_ms);
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
      for (int64_t k : o.ks) {
        basp::layout::Geometry g;
        g.layout = layout;
        g.b_loc = kLocalSequences;
        g.seq_len = tokens / kLocalSequences * k;
        g.k = k;
        g.heads = kHeads;
        g.split_heads = kHeads;
        g.head_dim = kHeadDim;
        g.elem = kElem;
        const basp::layout::PackedWorkspace ws = basp::layout::make_packed_workspace(&g, 1);
        if (ws.bytes() != bytes) {
          std::fprintf(stderr, "internal: workspace %lld != tensor %lld bytes\n", static_cast<long long>(ws.bytes()),
                       static_cast<long long>(bytes));
          return 1;
        }
        const void* seq_in[1] = {seq.get()};
        void* seq_out[1] = {back.get()};
        const void* head_in[1] = {head.get()};
        void* head_out[1] = {head.get()};
        struct Op {
          const char* name;
          cudaError_t (*run)(const basp::layout::Geometry&, const basp::layout::PackedWorkspace&, const void* const*,
                             void* const*, std::byte*, cudaStream_t);
        };
        using basp::layout::cuda::launch_gather_pack;
        using basp::layout::cuda::launch_gather_unpack;
        using basp::layout::cuda::launch_scatter_pack;
        using basp::layout::cuda::launch_scatter_unpack;
        const Op ops[] = {
            {"scatter_pack", [](const auto& g, const auto& ws, const void* const* in, void* const*, std::byte* w,
                                cudaStream_t s) { return launch_scatter_pack(&g, 1, ws, in, w, s); }},
            {"scatter_unpack", [](const auto& g, const auto& ws, const void* const*, void* const* out, std::byte* w,
                                  cudaStream_t s) { return launch_scatter_unpack(&g, 1, ws, w, out, s); }},
            {"gather_pack", [](const auto& g, const auto& ws, const void* const* in, void* const*, std::byte* w,
                               cudaStream_t s) { return launch_gather_pack(&g, 1, ws, in, w, s); }},
            {"gather_unpack", [](const auto& g, const auto& ws, const void* const*, void* const* out, std::byte* w,
                                 cudaStream_t s) { return launch_gather_unpack(&g, 1, ws, w, out, s); }},
        };
        const void* const* inputs[] = {seq_in, nullptr, head_in, nullptr};
        void* const* outputs[] = {nullptr, head_out, nullptr, seq_out};
        for (int i = 0; i < 4; ++i) {
          const double ms =
              median_ms(o, stream, [&] { BENCH_CUDA(ops[i].run(g, ws, inputs[i], outputs[i], wire.get(), stream)); });
          const double bw = gbps(bytes, ms);
          const double ratio = bw / copy_gbps;
          worst = std::min(worst, ratio);
          if (ratio < kTarget) ++below;
          std::printf("%14lld %6s %3lld %-15s %10.1f %9.1f %12.1f %7.1f%%%s\n", static_cast<long long>(bytes),
                      layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", static_cast<long long>(k), ops[i].name, ms * 1e3,
                      bw, copy_gbps, 100.0 * ratio, ratio < kTarget ? "  < 90%" : "");
          if (json) {
            std::fprintf(json,
                         "%s  {\"bytes\": %lld, \"layout\": \"%s\", \"k\": %lld, \"op\": \"%s\", \"time_us\": %.3f, "
                         "\"gbps\": %.3f, \"memcpy_gbps\": %.3f}",
                         first_json ? "" : ",\n", static_cast<long long>(bytes),
                         layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", static_cast<long long>(k), ops[i].name, ms * 1e3,
                         bw, copy_gbps);
            first_json = false;
          }
        }
        if (o.check) {
          // The four movements compose to the identity on the sequence-sharded tensor (no exchange in between).
          BENCH_CUDA(cudaMemsetAsync(back.get(), 0xA5, static_cast<size_t>(bytes), stream));
          for (int i = 0; i < 4; ++i) BENCH_CUDA(ops[i].run(g, ws, inputs[i], outputs[i], wire.get(), stream));
          BENCH_CUDA(cudaStreamSynchronize(stream));
          std::vector<std::byte> a(static_cast<size_t>(bytes)), b(static_cast<size_t>(bytes));
          BENCH_CUDA(cudaMemcpy(a.data(), seq.get(), a.size(), cudaMemcpyDeviceToHost));
          BENCH_CUDA(cudaMemcpy(b.data(), back.get(), b.size(), cudaMemcpyDeviceToHost));
          if (std::memcmp(a.data(), b.data(), a.size()) != 0) {
            ++failed_checks;
            std::printf("# CHECK FAILED: %s K %lld: pack/unpack round trip differs from the input\n",
                        layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", static_cast<long long>(k));
          }
        }
      }
    }
  }
  if (json) {
    std::fprintf(json, "\n]}\n");
    std::fclose(json);
  }
  BENCH_CUDA(cudaStreamDestroy(stream));
  std::printf(
      "# Lowest pack/unpack bandwidth: %.1f%% of cudaMemcpyAsync D2D (target >= %.0f%%); %d of the rows "
      "below target\n",
      100.0 * worst, 100.0 * kTarget, below);
  std::printf("# Round-trip check: %s\n", !o.check ? "not run (-c 0)" : failed_checks == 0 ? "OK" : "FAILED");
  return failed_checks == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  StudyOptions options = bandwidth_options(o);
  return basp::bench::study_main("basp_pack_bandwidth", argc, argv, options, [&] { return run(o); });
}
