// The host cost of a batch plan (docs/benchmarks.md): basp_batch_plan_create + basp_plan_destroy on a
// comm of N ranks, and basp_comm_partition_batch (the planner through the C ABI) on the same comm, with Google
// Benchmark. Target: a batch plan <= 100 us at N = 64. Creation talks to no rank, so rank 0 measures alone while the
// other ranks sleep in a polled barrier (no busy wait stealing the shared cores).
//
// usage: mpirun -np 64 --oversubscribe basp_batch_plan_create [google benchmark flags]
#include <mpi.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "study_mpi.h"

namespace {

basp_comm_t g_comm = nullptr;
int g_size = 1;
constexpr int64_t kCapacity = 4096;

void check(basp_status_t rc, const char* what) {
  if (rc != BASP_SUCCESS) {
    std::fprintf(stderr, "%s: %s\n", what, basp_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Rank 0 in a group of K (ranks 0..K-1), the other ranks in groups of 8 (the last smaller); one document per group
// filling its ranks' capacity. Q, K, V of Llama-3-8B's attention: 32/8/8 heads of 128, BF16, THD.
void BM_BatchPlanCreate(benchmark::State& state) {
  const auto k = static_cast<int32_t>(state.range(0));
  std::vector<int32_t> sizes{k};
  for (int32_t left = g_size - k; left > 0; left -= 8) sizes.push_back(left < 8 ? left : 8);
  std::vector<int32_t> ranks(static_cast<size_t>(g_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::vector<int32_t> docs(sizes.size(), 1);
  std::vector<int64_t> lengths;
  for (int32_t s : sizes) lengths.push_back(s * kCapacity);
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = static_cast<int32_t>(sizes.size());
  b.num_docs = b.num_groups;
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = docs.data();
  b.lengths = lengths.data();
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_THD;
  d.dtype = BASP_DTYPE_BF16;
  d.head_dim = 128;
  d.num_tensors = 3;
  d.num_heads[0] = 32;
  d.num_heads[1] = d.num_heads[2] = 8;
  d.query_heads[1] = d.query_heads[2] = 32;
  for (auto _ : state) {
    basp_plan_t plan = nullptr;
    check(basp_batch_plan_create(g_comm, &d, &b, &plan), "basp_batch_plan_create");
    check(basp_plan_destroy(plan), "basp_plan_destroy");
  }
  state.counters["N"] = g_size;
  state.counters["groups"] = static_cast<double>(sizes.size());
}

// The planner on the comm's machine and model: a long-tail batch of fill % of N * capacity tokens (log-normal,
// median 1,024, sigma 1.2, clipped to [32, 16,384], the last document cut to fit); the argument is the fill. An
// exactly full batch (100) makes the planner pack groups by exact subset sums where the greedy overflows; at 90 %
// the greedy fits.
void BM_PlanBatch(benchmark::State& state) {
  std::mt19937_64 rng(0);
  std::lognormal_distribution<double> dist(std::log(1024.0), 1.2);
  std::vector<int64_t> lengths;
  int64_t total = 0;
  const int64_t want = g_size * kCapacity * state.range(0) / 100;
  while (total < want) {
    int64_t l = std::llround(dist(rng));
    l = l < 32 ? 32 : (l > 16384 ? 16384 : l);
    l = std::min<int64_t>(l, want - total);
    lengths.push_back(l);
    total += l;
  }
  basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
  p.num_docs = static_cast<int32_t>(lengths.size());
  p.lengths = lengths.data();
  p.dtype = BASP_DTYPE_BF16;
  p.query_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  std::vector<int32_t> sizes(static_cast<size_t>(g_size)), ranks(static_cast<size_t>(g_size)),
      group_docs(static_cast<size_t>(g_size)), docs(lengths.size());
  basp_batch_t out = BASP_BATCH_INITIALIZER;
  for (auto _ : state) {
    check(basp_comm_partition_batch(g_comm, &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &out,
                                    nullptr),
          "basp_comm_partition_batch");
    benchmark::DoNotOptimize(out.num_groups);
  }
  state.counters["N"] = g_size;
  state.counters["docs"] = static_cast<double>(lengths.size());
  state.counters["groups"] = out.num_groups;
}

// Rank 0 runs the benchmarks (its Google Benchmark flags in argv) while the others wait.
int run(int argc, char** argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 0;
  cfg.batch_capacity = kCapacity;
  check(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &g_comm), "basp_comm_create_mpi");
  // The planner needs attention coefficients to weigh against exchange (figures of one CPU core, order of magnitude).
  basp_cost_model_t model = BASP_COST_MODEL_INITIALIZER;
  check(basp_comm_get_cost_model(g_comm, &model), "basp_comm_get_cost_model");
  model.c2 = 1e-9;
  model.c1 = 1e-6;
  check(basp_comm_set_cost_model(g_comm, &model), "basp_comm_set_cost_model");
  if (rank == 0) {
    // Rank 0's group: alone, a pair, a node of 8, the whole world.
    auto* create = benchmark::RegisterBenchmark("BM_BatchPlanCreate", BM_BatchPlanCreate);
    for (int k : {1, 2, 8, g_size}) {
      if (k <= g_size && (k < g_size || k > 8)) create->Arg(k);
    }
    if (g_size <= 8) create->Arg(g_size);
    create->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_PlanBatch", BM_PlanBatch)->Arg(100)->Arg(90)->Unit(benchmark::kMicrosecond);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  // Everyone else sleeps until rank 0 is done.
  MPI_Request done = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  for (int flag = 0; !flag;) {
    MPI_Test(&done, &flag, MPI_STATUS_IGNORE);
    if (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  basp_comm_destroy(g_comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  basp::bench::StudyOptions options(
      "usage: mpirun -np 64 --oversubscribe basp_batch_plan_create [--benchmark_* flags of Google Benchmark]\n");
  options.pass("--benchmark_");
  return basp::bench::mpi_study_main("basp_batch_plan_create", argc, argv, options, [&] { return run(argc, argv); });
}
