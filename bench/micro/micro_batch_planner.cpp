// The batch planner (src/plan/batch_planner.h) on 8-GPU NVSwitch nodes: what every rank computes once per packed
// micro-batch. Targets: <= 10 ms for 1,024 documents on 1,024 ranks, <= 1 s for 16,384 documents on
// 65,536 ranks. Lengths are log-normal (seeded), the capacity holds the batch with 25 % to spare, the cost model
// is a 100 Gbit/s network with H100-like attention; the mixed placement of the same sizes is measured apart.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plan/batch_planner.h"

namespace {

basp::plan::NodeLinks nvswitch_node() {
  basp::plan::NodeLinks n;
  n.num_gpus = 8;
  n.bandwidth.assign(64, 18 * 25000);
  n.locality.assign(64, basp::plan::kLocalityNumaNode);
  for (int32_t a = 0; a < 8; ++a) n.bandwidth[a * 8 + a] = 0;
  return n;
}

basp::plan::BatchProblem make_problem(int32_t docs, int32_t ranks) {
  basp::plan::BatchProblem p;
  p.machine.ranks.resize(static_cast<size_t>(ranks));
  for (int32_t r = 0; r < ranks; ++r) {
    p.machine.ranks[r].node = static_cast<uint64_t>(r / 8) + 1;
    p.machine.ranks[r].gpu = r % 8;
    if (p.machine.nodes.count(p.machine.ranks[r].node) == 0) p.machine.nodes[p.machine.ranks[r].node] = nvswitch_node();
  }
  std::mt19937_64 rng(16);
  std::lognormal_distribution<double> dist(8.5, 1.2);
  for (int32_t d = 0; d < docs; ++d) p.lengths.push_back(std::max<int64_t>(1, static_cast<int64_t>(dist(rng))));
  const int64_t total = std::accumulate(p.lengths.begin(), p.lengths.end(), int64_t{0});
  const int64_t longest = *std::max_element(p.lengths.begin(), p.lengths.end());
  p.capacity = std::max<int64_t>((longest + ranks - 1) / ranks, total * 5 / 4 / ranks + 1);
  p.query_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.elem_size = 2;
  p.model.a0 = 2e-5;
  p.model.a1 = 1e-6;
  p.model.beta_node = 1.0 / 150e9;
  p.model.beta_network = 1.0 / 12.5e9;
  p.model.c2 = 2e-11;
  p.model.c1 = 1e-8;
  return p;
}

// args: documents, ranks.
void BM_plan_batch(benchmark::State& state) {
  const basp::plan::BatchProblem p =
      make_problem(static_cast<int32_t>(state.range(0)), static_cast<int32_t>(state.range(1)));
  basp::plan::BatchPartition plan;
  for (auto _ : state) {
    plan = basp::plan::plan_batch(p);
    benchmark::DoNotOptimize(plan.predicted_seconds);
  }
  std::vector<size_t> sizes;
  for (const auto& g : plan.groups) sizes.push_back(g.members.size());
  state.counters["groups"] = static_cast<double>(plan.groups.size());
  state.counters["largest_K"] = static_cast<double>(*std::max_element(sizes.begin(), sizes.end()));
  state.counters["predicted_ms"] = plan.predicted_seconds * 1e3;
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// The placement of the planner's own sizes alone.
void BM_place_mixed_groups(benchmark::State& state) {
  const basp::plan::BatchProblem p =
      make_problem(static_cast<int32_t>(state.range(0)), static_cast<int32_t>(state.range(1)));
  std::vector<int32_t> sizes;
  for (const auto& g : basp::plan::plan_batch(p).groups) sizes.push_back(static_cast<int32_t>(g.members.size()));
  for (auto _ : state) benchmark::DoNotOptimize(basp::plan::place_mixed_groups(p.machine, sizes));
  state.counters["groups"] = static_cast<double>(sizes.size());
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"docs", "N"});
  b->Args({64, 64});
  b->Args({1024, 1024});
  b->Args({4096, 8192});
  b->Args({16384, 65536});
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_plan_batch)->Apply(args);
BENCHMARK(BM_place_mixed_groups)->Apply(args);

BENCHMARK_MAIN();
