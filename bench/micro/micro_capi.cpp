// Through the public C ABI, in one process (singleton MPI_Init, MPI_COMM_SELF: N = 1, K = 1): what creating a
// comm and a plan costs, and the per-call host overhead of basp_scatter/basp_gather on a tiny tensor (argument
// checks, handle lookup, dispatch; the exchange itself degenerates to a local copy of a few bytes).
#include <mpi.h>

#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"

namespace {

void check(basp_status_t status, benchmark::State& state) {
  if (status != BASP_SUCCESS) state.SkipWithError(basp_last_error());
}

basp_comm_t make_self_comm(benchmark::State& state) {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 1;
  basp_comm_t comm = nullptr;
  check(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_SELF), &cfg, &comm), state);
  return comm;
}

// Q, K, V of a realistic layer (Hq = 32, Hkv = 8, D = 128, bf16) at state.range(0) tokens.
basp_plan_desc_t qkv_desc(int64_t seq_len) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = seq_len;
  d.head_dim = 128;
  d.num_tensors = 3;
  d.num_heads[0] = 32;
  d.num_heads[1] = 8;
  d.num_heads[2] = 8;
  return d;
}

void BM_comm_create(benchmark::State& state) {
  for (auto _ : state) {
    basp_comm_t comm = make_self_comm(state);
    basp_comm_destroy(comm);
  }
}

void BM_plan_create(benchmark::State& state) {
  basp_comm_t comm = make_self_comm(state);
  const basp_plan_desc_t desc = qkv_desc(state.range(0));
  for (auto _ : state) {
    basp_plan_t plan = nullptr;
    check(basp_plan_create(comm, &desc, &plan), state);
    basp_plan_destroy(plan);
  }
  basp_comm_destroy(comm);
  state.SetLabel("qkv S=" + std::to_string(state.range(0)) + " K=1");
}

// One byte per tensor: the time is the library's fixed cost per call.
void run_tiny(benchmark::State& state, bool scatter) {
  basp_comm_t comm = make_self_comm(state);
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.dtype = BASP_DTYPE_BYTE;
  desc.seq_len = 1;
  desc.head_dim = 1;
  desc.num_tensors = static_cast<int32_t>(state.range(0));
  for (int32_t t = 0; t < desc.num_tensors; ++t) desc.num_heads[t] = 1;
  basp_plan_t plan = nullptr;
  check(basp_plan_create(comm, &desc, &plan), state);
  std::vector<unsigned char> in(BASP_MAX_TENSORS, 7), out(BASP_MAX_TENSORS, 0);
  const void* ins[BASP_MAX_TENSORS];
  void* outs[BASP_MAX_TENSORS];
  for (int t = 0; t < BASP_MAX_TENSORS; ++t) {
    ins[t] = &in[t];
    outs[t] = &out[t];
  }
  for (auto _ : state) {
    const basp_status_t s = scatter ? basp_scatter(plan, ins, outs, nullptr) : basp_gather(plan, ins, outs, nullptr);
    if (s != BASP_SUCCESS) {
      state.SkipWithError(basp_last_error());
      break;
    }
    benchmark::ClobberMemory();
  }
  if (std::memcmp(in.data(), out.data(), static_cast<size_t>(desc.num_tensors)) != 0) {
    state.SkipWithError("the tiny exchange did not copy its bytes");
  }
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
  state.SetLabel(std::to_string(desc.num_tensors) + " tensor(s) of 1 byte, K=1");
}

void BM_scatter_overhead(benchmark::State& state) { run_tiny(state, true); }
void BM_gather_overhead(benchmark::State& state) { run_tiny(state, false); }

}  // namespace

BENCHMARK(BM_comm_create)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_plan_create)->Arg(8192)->Arg(65536)->ArgName("S")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_scatter_overhead)->Arg(1)->Arg(3)->ArgName("tensors");
BENCHMARK(BM_gather_overhead)->Arg(1)->Arg(3)->ArgName("tensors");

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    MPI_Finalize();
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
