// What the pointer-kind check of an execute costs with a CUDA driver (docs/benchmarks.md): on one GPU, a
// one-rank NCCL-backend comm from basp_comm_create_oob (a one-rank all-gather: a copy), a plan of Q, K, V of a few
// bytes (K = 1: an execute enqueues one device copy per tensor), and basp_scatter timed on the host over many calls:
// the same device pointers every call (the check runs once: the plan remembers the set that passed), two sets
// alternating (the check, cudaPointerGetAttributes per pointer, runs every call), and alternating with
// BASP_CHECK_POINTERS=0. Exits 77 without a device.
//
// usage: basp_pointer_check_cost [calls]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "basp/basp.h"
#include "study.h"

namespace {

int oob_start(void*, const void* send, void* recv, size_t bytes, void** request) {
  std::memcpy(recv, send, bytes);
  *request = nullptr;
  return BASP_OOB_SUCCESS;
}
int oob_test(void*, void*) { return BASP_OOB_SUCCESS; }
int oob_free(void*, void*) { return BASP_OOB_SUCCESS; }

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "basp_pointer_check_cost: %s: %s\n", what, basp_last_error());
  std::exit(1);
}

int run(int calls) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("basp_pointer_check_cost: skipped: no CUDA device\n");
    return 77;
  }
  cudaSetDevice(0);
  basp_oob_t oob = BASP_OOB_INITIALIZER;
  oob.rank = 0;
  oob.num_ranks = 1;
  oob.allgather_start = &oob_start;
  oob.allgather_test = &oob_test;
  oob.allgather_free = &oob_free;
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 1;
  cfg.backend = BASP_BACKEND_NCCL;
  basp_comm_t comm = nullptr;
  if (basp_comm_create_oob(&oob, &cfg, &comm) != BASP_SUCCESS) die("basp_comm_create_oob");
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.dtype = BASP_DTYPE_BYTE;
  d.seq_len = 1;
  d.head_dim = 16;
  d.num_tensors = 3;
  for (int t = 0; t < 3; ++t) d.num_heads[t] = 1;
  basp_plan_t plans[2] = {nullptr, nullptr};
  if (basp_plan_create(comm, &d, &plans[0]) != BASP_SUCCESS) die("basp_plan_create");
  setenv("BASP_CHECK_POINTERS", "0", 1);
  if (basp_plan_create(comm, &d, &plans[1]) != BASP_SUCCESS) die("basp_plan_create (BASP_CHECK_POINTERS=0)");
  unsetenv("BASP_CHECK_POINTERS");
  void* buffers[12];
  for (void*& b : buffers) {
    if (cudaMalloc(&b, 16) != cudaSuccess) die("cudaMalloc");
  }
  const void* ins[2][3] = {{buffers[0], buffers[1], buffers[2]}, {buffers[3], buffers[4], buffers[5]}};
  void* outs[2][3] = {{buffers[6], buffers[7], buffers[8]}, {buffers[9], buffers[10], buffers[11]}};
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  struct Variant {
    const char* name;
    int plan;
    bool alternate;
  } variants[] = {{"same pointers", 0, false}, {"alternating", 0, true}, {"alternating, checks off", 1, true}};
  std::printf(
      "# basp_pointer_check_cost: basp_scatter of 3 tensors of 16 bytes (K = 1: one device copy each), host\n"
      "# time per call over %d calls, median of 5 passes\n#  pointers                  per call(us)\n",
      calls);
  double median[3] = {0, 0, 0};
  int index = 0;
  for (const Variant& v : variants) {
    std::vector<double> passes;
    for (int pass = 0; pass < 5; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) {
        const int set = v.alternate ? i % 2 : 0;
        if (basp_scatter(plans[v.plan], ins[set], outs[set], stream) != BASP_SUCCESS) die("basp_scatter");
      }
      passes.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                       calls);
      cudaStreamSynchronize(stream);
    }
    std::sort(passes.begin(), passes.end());
    median[index++] = passes[2];
    std::printf("   %-24s  %12.2f\n", v.name, passes[2]);
  }
  // The check's cost: the same alternating calls with the check and without it (the pointers' switching costs
  // both alike). Against the same pointers every call, for comparison: that difference also holds the switching.
  std::printf(
      "# pointer-kind check per call (6 pointers, driver present): %.2f us (alternating, checks on - off); "
      "alternating - same pointers: %.2f us\n",
      median[1] - median[2], median[1] - median[0]);
  for (void* b : buffers) cudaFree(b);
  cudaStreamDestroy(stream);
  basp_plan_destroy(plans[0]);
  basp_plan_destroy(plans[1]);
  basp_comm_destroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20000;
  basp::bench::StudyOptions options("usage: basp_pointer_check_cost [calls, default 20000]\n");
  options.positional(
      "calls", [&](const std::string& v) { calls = static_cast<int>(basp::bench::parse_int(v, "calls", 1, 1 << 30)); });
  return basp::bench::study_main("basp_pointer_check_cost", argc, argv, options, [&] { return run(calls); });
}
