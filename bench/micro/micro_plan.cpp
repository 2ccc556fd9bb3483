// Planning cost at N = 8 ... 65,536 ranks (src/plan/): what every rank computes once per micro-batch size
// (the groups) and once per tensor shape (the exchange plan).
#include <benchmark/benchmark.h>

#include <string>

#include "plan/exchange.h"
#include "plan/groups.h"

namespace {

// The groups for N ranks and B sequences: G = gcd(N, B), the contiguous members, the validated layout with
// its lookup tables, and the rank's own description (what basp_comm_create_mpi computes before splitting).
void plan_groups(benchmark::State& state, int64_t micro_batch) {
  const auto n = static_cast<int32_t>(state.range(0));
  for (auto _ : state) {
    const int32_t g = basp::plan::resolve_num_groups(n, micro_batch, -1);
    basp::plan::GroupLayout layout = basp::plan::make_layout(n, micro_batch, basp::plan::contiguous_members(n, g));
    benchmark::DoNotOptimize(basp::plan::describe_rank(layout, n - 1, 0));
    benchmark::DoNotOptimize(layout);
  }
  state.SetItemsProcessed(state.iterations() * n);  // items = ranks placed
}

// B = N/8: G = N/8 groups of K = 8 (one 8-GPU node each).
void BM_plan_groups_k8(benchmark::State& state) {
  plan_groups(state, state.range(0) / 8);
  state.SetLabel("B=N/8");
}
// B = 1: DeepSpeed-Ulysses, one group of N.
void BM_plan_groups_ulysses(benchmark::State& state) {
  plan_groups(state, 1);
  state.SetLabel("B=1");
}

// The exchange plan of one rank for Q, K, V (Hq = 32, Hkv = 8, D = 128, bf16, S = 8192): independent of N, it
// depends only on the tensor count; measured at K = 1 and 8, with the validation of the descriptor.
void BM_exchange_plan(benchmark::State& state) {
  const auto k = static_cast<int32_t>(state.range(0));
  basp_plan_desc_v1 desc = BASP_PLAN_DESC_INITIALIZER;
  desc.layout = BASP_LAYOUT_BSHD;
  desc.dtype = BASP_DTYPE_BF16;
  desc.seq_len = 8192;
  desc.head_dim = 128;
  desc.num_tensors = 3;
  desc.num_heads[0] = 32;
  desc.num_heads[1] = 8;
  desc.num_heads[2] = 8;
  for (auto _ : state) {
    const basp::plan::ExchangeSpec spec = basp::plan::validate_spec(desc);
    benchmark::DoNotOptimize(basp::plan::make_exchange_plan(spec, k, k - 1, 2));
  }
  state.SetLabel("qkv K=" + std::to_string(k));
}

void ranks(benchmark::internal::Benchmark* b) {
  b->ArgName("N");
  for (int64_t n = 8; n <= 65536; n *= 8) b->Arg(n);
  b->Arg(65536);
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_plan_groups_k8)->Apply(ranks);
BENCHMARK(BM_plan_groups_ulysses)->Apply(ranks);
BENCHMARK(BM_exchange_plan)->Arg(1)->Arg(8)->ArgName("K")->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
