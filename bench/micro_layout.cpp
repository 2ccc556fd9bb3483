// Host pack/unpack (src/layout/host_copy.h) against memcpy of the same bytes: how far the layout copies of the
// MPI backend are from this machine's copy bandwidth. One iteration moves one whole tensor (all K peers' rows),
// so bytes_per_second is directly comparable with BM_memcpy at the same size. Rates use CPU time (Google
// Benchmark's default): on a shared machine wall time also counts the time other processes held the core.
//
// Shapes: a 64 MiB per-rank tensor (Hq = 32, D = 128, bf16: 8 KiB per token) over K = 2 and 8, both layouts,
// plus a small-row case (Hkv = 8, D = 64: 1 KiB per token, 128-byte rows at K = 8).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "layout/host_copy.h"

namespace {

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<std::byte, FreeDeleter>;

Bytes make_buffer(int64_t bytes) {
  Bytes b(static_cast<std::byte*>(std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64))));
  std::memset(b.get(), 1, static_cast<size_t>(bytes));  // fault the pages in before timing
  return b;
}

constexpr int64_t kTensorBytes = int64_t{64} << 20;

// args: layout, K, heads, head_dim (bf16); b_loc = 2 sequences, tokens chosen for kTensorBytes.
basp::layout::Geometry geometry(const benchmark::State& state) {
  basp::layout::Geometry g;
  g.layout = static_cast<int32_t>(state.range(0));
  g.k = state.range(1);
  g.heads = state.range(2);
  g.head_dim = state.range(3);
  g.elem = 2;
  g.b_loc = 2;
  g.s_loc = kTensorBytes / (g.b_loc * g.heads * g.head_dim * g.elem);
  return g;
}

void set_label(benchmark::State& state, const basp::layout::Geometry& g) {
  state.SetLabel(std::string(g.layout == BASP_LAYOUT_BSHD ? "bshd" : "sbhd") + " K=" + std::to_string(g.k) +
                 " row=" + std::to_string(g.row_bytes()) + "B");
}

using CopyFn = void (*)(const basp::layout::Geometry&, const std::byte*, std::byte*, int64_t);

// Packs (or unpacks, or copies) every peer's rows: the full tensor passes through the copy once.
void run_copy(benchmark::State& state, CopyFn fn, bool wire_is_source) {
  const basp::layout::Geometry g = geometry(state);
  const int64_t bytes = g.tensor_bytes();
  Bytes tensor = make_buffer(bytes);
  Bytes other = make_buffer(bytes);
  for (auto _ : state) {
    for (int64_t j = 0; j < g.k; ++j) {
      // On the wire side each peer's chunk has its own slot; on the head side copy_* index by peer already.
      const int64_t slot = wire_is_source ? j * g.chunk_bytes() : 0;
      fn(g, other.get() + slot, tensor.get(), j);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  set_label(state, g);
}

void BM_pack_seq_rows(benchmark::State& state) {
  const basp::layout::Geometry g = geometry(state);
  const int64_t bytes = g.tensor_bytes();
  Bytes seq = make_buffer(bytes);
  Bytes wire = make_buffer(bytes);
  for (auto _ : state) {
    for (int64_t j = 0; j < g.k; ++j) basp::layout::pack_seq_rows(g, seq.get(), wire.get() + j * g.chunk_bytes(), j);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  set_label(state, g);
}

void BM_unpack_seq_rows(benchmark::State& state) { run_copy(state, &basp::layout::unpack_seq_rows, true); }
void BM_copy_head_to_seq(benchmark::State& state) { run_copy(state, &basp::layout::copy_head_to_seq, false); }

void BM_copy_seq_to_head(benchmark::State& state) {
  const basp::layout::Geometry g = geometry(state);
  const int64_t bytes = g.tensor_bytes();
  Bytes seq = make_buffer(bytes);
  Bytes head = make_buffer(bytes);
  for (auto _ : state) {
    for (int64_t j = 0; j < g.k; ++j) basp::layout::copy_seq_to_head(g, seq.get(), head.get(), j);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  set_label(state, g);
}

// The reference: one memcpy of the same bytes (this machine's copy bandwidth at that size).
void BM_memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Bytes src = make_buffer(bytes);
  Bytes dst = make_buffer(bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), static_cast<size_t>(bytes));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

void layout_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layout", "K", "heads", "dim"});
  for (int64_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
    for (int64_t k : {2, 8}) b->Args({layout, k, 32, 128});
    b->Args({layout, 8, 8, 64});
  }
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(int64_t{4} << 20)->Arg(kTensorBytes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_pack_seq_rows)->Apply(layout_args);
BENCHMARK(BM_unpack_seq_rows)->Apply(layout_args);
BENCHMARK(BM_copy_seq_to_head)->Apply(layout_args);
BENCHMARK(BM_copy_head_to_seq)->Apply(layout_args);

BENCHMARK_MAIN();
