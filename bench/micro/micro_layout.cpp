// Host pack/unpack (src/layout/host_copy.h) against memcpy of the same bytes: how far the layout copies of the
// MPI backend are from this machine's copy bandwidth. One iteration moves one whole tensor (all K peers' rows),
// so bytes_per_second is directly comparable with BM_memcpy at the same size. Rates use CPU time (Google
// Benchmark's default): on a shared machine wall time also counts the time other processes held the core.
//
// Shapes: a 64 MiB per-rank tensor (Hq = 32, D = 128, bf16: 8 KiB per token) over K = 2 and 8, both layouts,
// plus a small-row case (Hkv = 8, D = 64: 1 KiB per token, 128-byte rows at K = 8); and the scatter's copies of the
// 64 MiB tensor at K = 4 cut into 1, 2, 4 and 8 head chunks.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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
  g.split_heads = g.heads;
  g.seq_len = kTensorBytes / (g.b_loc * g.heads * g.head_dim * g.elem) * g.k;
  return g;
}

void set_label(benchmark::State& state, const basp::layout::Geometry& g) {
  state.SetLabel(std::string(g.layout == BASP_LAYOUT_BSHD ? "bshd" : "sbhd") + " K=" + std::to_string(g.k) +
                 " row=" + std::to_string(g.head_row_bytes(0)) + "B");
}

// Moves every peer's rows between the sequence side and `place(j)` (a packed chunk per peer, or the head-sharded
// tensor): the full tensor passes through the copy once.
template <typename Move>
void run_rows(benchmark::State& state, Move move) {
  const basp::layout::Geometry g = geometry(state);
  const int64_t bytes = g.seq_tensor_bytes(0);
  Bytes seq = make_buffer(bytes);
  Bytes other = make_buffer(bytes);
  for (auto _ : state) {
    for (int64_t j = 0; j < g.k; ++j) move(g, seq.get(), other.get(), j);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  set_label(state, g);
}

using basp::layout::Geometry;
using basp::layout::RowPlace;

void BM_pack_seq_rows(benchmark::State& state) {
  run_rows(state, [](const Geometry& g, std::byte* seq, std::byte* wire, int64_t j) {
    basp::layout::seq_to_place(g, seq, RowPlace{wire + j * g.chunk_bytes(0, j), false}, j);
  });
}
void BM_unpack_seq_rows(benchmark::State& state) {
  run_rows(state, [](const Geometry& g, std::byte* seq, std::byte* wire, int64_t j) {
    basp::layout::place_to_seq(g, RowPlace{wire + j * g.chunk_bytes(0, j), false}, seq, j);
  });
}
// The head side as seen by every position in turn: the strided pattern of the own slice, K times.
void BM_copy_head_to_seq(benchmark::State& state) {
  run_rows(state, [](const Geometry& g, std::byte* seq, std::byte* head, int64_t j) {
    basp::layout::place_to_seq(g.seen_from(j), RowPlace{head, true}, seq, j);
  });
}
void BM_copy_seq_to_head(benchmark::State& state) {
  run_rows(state, [](const Geometry& g, std::byte* seq, std::byte* head, int64_t j) {
    basp::layout::seq_to_place(g.seen_from(j), seq, RowPlace{head, true}, j);
  });
}

// A whole scatter's host copies (scatter_rows: every position's rows into its packed chunk, streaming stores as the
// staged path uses them for tensors of 4 MiB and more) cut into C head chunks, all C per iteration: the same bytes
// as C = 1, in C times shorter pieces (docs/overlap.md, "Choosing C"). args: C, K, streaming (1: non-temporal
// stores); Hq = 32, D = 128, bf16, BSHD.
void BM_scatter_rows_chunks(benchmark::State& state) {
  basp::layout::Geometry g;
  g.layout = BASP_LAYOUT_BSHD;
  g.k = state.range(1);
  g.heads = g.split_heads = 32;
  g.head_dim = 128;
  g.elem = 2;
  g.b_loc = 2;
  g.seq_len = kTensorBytes / (g.b_loc * g.heads * g.head_dim * g.elem) * g.k;
  const auto count = static_cast<int32_t>(state.range(0));
  const int64_t bytes = g.seq_tensor_bytes(0);
  Bytes seq = make_buffer(bytes);
  Bytes wire = make_buffer(bytes);
  std::vector<RowPlace> places;
  for (int64_t j = 0; j < g.k; ++j) places.push_back(RowPlace{wire.get() + j * g.chunk_bytes(0, j), false});
  for (auto _ : state) {
    for (int32_t c = 0; c < count; ++c) {
      basp::layout::Geometry chunk = g;
      chunk.chunk_index = c;
      chunk.chunk_count = count;
      basp::layout::scatter_rows(chunk, seq.get(), places.data(), state.range(2) != 0);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel("K=" + std::to_string(g.k) + " C=" + std::to_string(count) +
                 " piece=" + std::to_string(g.head_row_bytes(0) / count) + "B");
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
BENCHMARK(BM_scatter_rows_chunks)
    ->ArgNames({"C", "K", "streaming"})
    ->ArgsProduct({{1, 2, 4, 8}, {4}, {1, 0}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
