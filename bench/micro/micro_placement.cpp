// Topology-aware placement (src/plan/placement.h) at N = 8 ... 65,536 ranks on 8-GPU nodes: what every rank
// computes once per micro-batch size from the gathered topology. Two node kinds: an NVSwitch node (HGX
// H100/H200: all pairs at 18 NVLink4 links) and a DGX-1 V100 hybrid cube mesh (each GPU's 6 NVLink2 links: two to
// each of two peers, one to each of two others, none to the remaining three; dgx1_node below), where the partition
// inside a node is a real search.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "plan/placement.h"

namespace {

basp::plan::NodeLinks nvswitch_node() {
  basp::plan::NodeLinks n;
  n.num_gpus = 8;
  n.bandwidth.assign(64, 18 * 25000);  // MB/s one way summed over links
  n.locality.assign(64, basp::plan::kLocalityNumaNode);
  for (int32_t a = 0; a < 8; ++a) n.bandwidth[a * 8 + a] = 0;
  return n;
}

basp::plan::NodeLinks dgx1_node() {
  basp::plan::NodeLinks n;
  n.num_gpus = 8;
  n.bandwidth.assign(64, 0);
  n.locality.assign(64, basp::plan::kLocalitySystem);
  auto link = [&](int32_t a, int32_t b, uint32_t links) {
    n.bandwidth[a * 8 + b] = n.bandwidth[b * 8 + a] = links * 25000;
  };
  for (auto [a, b] : {std::pair{0, 3}, {0, 4}, {1, 2}, {1, 5}, {2, 3}, {4, 7}, {5, 6}, {6, 7}}) link(a, b, 2);
  for (auto [a, b] : {std::pair{0, 1}, {0, 2}, {1, 3}, {2, 6}, {3, 7}, {4, 5}, {4, 6}, {5, 7}}) link(a, b, 1);
  for (int32_t a = 0; a < 8; ++a) {
    for (int32_t b = 0; b < 8; ++b) {
      if (a / 4 == b / 4) n.locality[a * 8 + b] = basp::plan::kLocalityNumaNode;
    }
  }
  return n;
}

// args: N, K (group size), node kind (0 NVSwitch, 1 DGX-1).
void BM_place_groups(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const auto k = static_cast<int32_t>(state.range(1));
  const bool dgx1 = state.range(2) == 1;
  basp::plan::PlacementInput input;
  input.ranks.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    input.ranks[r].node = static_cast<uint64_t>(r / 8) + 1;
    input.ranks[r].gpu = r % 8;
    const uint64_t node = input.ranks[r].node;
    if (input.nodes.count(node) == 0) input.nodes[node] = dgx1 ? dgx1_node() : nvswitch_node();
  }
  for (auto _ : state) benchmark::DoNotOptimize(basp::plan::place_groups(input, n / k));
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(std::string(dgx1 ? "dgx1" : "nvswitch") + " K=" + std::to_string(k));
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "K", "node"});
  for (int64_t node : {0, 1}) {
    for (int64_t k : {2, 8}) {
      for (int64_t n = 8; n <= 65536; n *= 8) b->Args({n, k, node});
      b->Args({65536, k, node});
    }
  }
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_place_groups)->Apply(args);

BENCHMARK_MAIN();
