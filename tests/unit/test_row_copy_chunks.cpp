// Head chunks through the body of the CUDA pack/unpack kernels (layout::copy_tile and layout::sum_unpack_task,
// the very functions the kernels run) on the host: a whole group of K virtual ranks, each with its exchange plan
// (plan::ExchangePlan::call gives every chunk's geometry), its workspace (slotted; peer-major too where the shape
// is uniform) and the NCCL path's grouped send/recv emulated by copies of each chunk's piece (Geometry::moved_bytes
// at moved_offset). Every chunk c of a round of C in {1, 2, 3, max} must leave, in outputs poisoned once at the
// round's start, exactly the bytes the host copies (layout/host_copy.h, the MPI backend's) leave for the same chunk,
// and the round's end must equal the whole exchange's. The pieces of one round's chunks must not overlap in any
// receive workspace (a gather's contributions wait there until the chunk that sums them).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "layout/host_copy.h"
#include "layout/packed_workspace.h"
#include "layout/row_copy.h"
#include "pattern.h"
#include "plan/exchange.h"
#include "plan/head_chunks.h"
#include "split_reference.h"

using basp::Direction;
using basp::layout::Geometry;
using basp::layout::PackedWorkspace;
using basp::layout::TensorSide;
using basp::test::kPoison;
using Bytes = std::vector<std::byte>;
using Tensors = std::vector<std::vector<Bytes>>;  // [position][tensor]

namespace {

struct ChunkShape {
  const char* name;
  int64_t k, b_loc, seq_len, tokens;  // tokens: of the execute (THD: fewer than the capacity seq_len)
  std::vector<int64_t> heads, split_heads, head_dims;
};

// Uneven tokens and heads, GQA whose KV heads several positions hold (the summing gather), a query-like tensor
// below the chunk basis (moved at the ends), per-tensor head sizes, K = 1, and the textbook shape.
std::vector<ChunkShape> chunk_shapes() {
  return {
      {"uneven heads", 3, 2, 8, 8, {7, 7}, {7, 7}, {3, 5}},
      {"GQA 6/3 over 4, held heads", 4, 2, 7, 7, {6, 3, 3}, {6, 6, 6}, {4, 4, 3}},
      {"GQA 9/3 over 2, held heads", 2, 1, 5, 5, {9, 3, 3}, {9, 9, 9}, {2, 2, 6}},
      {"KV below the basis", 2, 2, 4, 4, {8, 2, 2}, {8, 2, 2}, {4, 4, 4}},
      {"GQA 8/2 over 3, held heads", 3, 1, 9, 9, {8, 2}, {8, 8}, {8, 1}},
      {"one position", 1, 2, 3, 3, {4, 2}, {4, 4}, {2, 2}},
      {"textbook", 2, 2, 6, 6, {4, 4, 4}, {4, 4, 4}, {8, 8, 8}},
  };
}

struct Group {
  std::vector<basp::plan::ExchangePlan> plans;  // by position
  int32_t n = 0;
  int64_t k = 0;
  int32_t dtype = 0;
};

Group make_group(const ChunkShape& shape, int32_t layout, int32_t dtype, int64_t elem) {
  basp::plan::ExchangeSpec spec;
  spec.layout = layout;
  spec.dtype = dtype;
  spec.elem_size = elem;
  spec.seq_len = shape.seq_len;
  spec.num_heads = shape.heads;
  spec.split_heads = shape.split_heads;
  spec.head_dims = shape.head_dims;
  Group g;
  g.k = shape.k;
  g.n = static_cast<int32_t>(shape.heads.size());
  g.dtype = dtype;
  for (int64_t l = 0; l < shape.k; ++l) {
    g.plans.push_back(basp::plan::make_exchange_plan(spec, static_cast<int32_t>(shape.k), static_cast<int32_t>(l),
                                                     layout == BASP_LAYOUT_THD ? 1 : shape.b_loc));
  }
  return g;
}

// What the kernels run, on the host: every thread of every tile of one launch.
void run_on_host(const basp::layout::RowCopyArgs& a) {
  for (int64_t tile = 0; tile < a.num_tiles; ++tile)
    for (int32_t thread = 0; thread < basp::layout::kCopyThreads; ++thread) basp::layout::copy_tile(a, tile, thread);
}

// One chunk of one direction through the kernel bodies: pack on every position, the pieces sent, unpack (the
// plain row copy, and the summing unpack for a tensor whose heads several positions hold). `send`, `recv`: each
// position's workspaces, kept over the round; `written`: how often each receive byte was written in the round.
void kernel_chunk(const Group& grp, const std::vector<PackedWorkspace>& ws, int64_t tokens, basp::plan::HeadChunk chunk,
                  Direction dir, const Tensors& in, Tensors& out, std::vector<Bytes>& send, std::vector<Bytes>& recv,
                  std::vector<std::vector<int>>& written) {
  const bool scatter = dir == Direction::kScatter;
  const int32_t n = grp.n;
  std::vector<basp::plan::CallGeometry> calls;
  for (int64_t l = 0; l < grp.k; ++l) calls.push_back(grp.plans[l].call(tokens, chunk, dir));
  for (int64_t l = 0; l < grp.k; ++l) {
    std::vector<const void*> p(n);
    for (int32_t t = 0; t < n; ++t) p[t] = in[l][t].data();
    run_on_host(basp::layout::make_row_copy_args(calls[l].tensors.data(), n, ws[l],
                                                 scatter ? TensorSide::kSeq : TensorSide::kHead, true, p.data(),
                                                 send[l].data()));
  }
  for (int32_t t = 0; t < n; ++t) {
    for (int64_t from = 0; from < grp.k; ++from) {
      for (int64_t to = 0; to < grp.k; ++to) {
        const Geometry& g = calls[from].at(t);
        const int64_t s = scatter ? from : to;  // the piece's sequence and head positions
        const int64_t h = scatter ? to : from;
        const int64_t bytes = g.moved_bytes(s, h);
        REQUIRE(bytes == calls[to].at(t).moved_bytes(s, h));
        if (bytes == 0) continue;
        const int64_t dst = ws[to].chunk_offset(t, from) + g.moved_offset(s, h);
        std::memcpy(recv[to].data() + dst, send[from].data() + ws[from].chunk_offset(t, to) + g.moved_offset(s, h),
                    static_cast<size_t>(bytes));
        for (int64_t b = dst; b < dst + bytes; ++b) ++written[to][b];
      }
    }
  }
  for (int64_t l = 0; l < grp.k; ++l) {
    std::vector<Geometry> plain(calls[l].tensors.begin(), calls[l].tensors.begin() + n);
    std::vector<void*> p(n);
    for (int32_t t = 0; t < n; ++t) {
      p[t] = out[l][t].data();
      if (!scatter && plain[t].replicated()) plain[t].b_loc = 0;  // as the NCCL path: the summing unpack's
    }
    run_on_host(basp::layout::make_row_copy_args(plain.data(), n, ws[l], scatter ? TensorSide::kHead : TensorSide::kSeq,
                                                 false, p.data(), recv[l].data()));
    for (int32_t t = 0; t < n && !scatter; ++t) {
      if (!calls[l].at(t).replicated()) continue;
      basp::layout::SumUnpackArgs a;
      a.geom = calls[l].at(t);
      a.tensor = t;
      a.dtype = grp.dtype;
      a.seq = reinterpret_cast<unsigned char*>(out[l][t].data());
      a.wire = reinterpret_cast<const unsigned char*>(recv[l].data());
      a.workspace = ws[l];
      for (int64_t task = 0; task < a.num_tasks(); ++task)
        for (int32_t thread = 0; thread < 3; ++thread) basp::layout::sum_unpack_task(a, task, thread, 3);
    }
  }
}

// The same chunk through the host copies, the rows going straight into (scatter) or out of (gather) every
// position's head-sharded tensor.
void host_chunk(const Group& grp, int64_t tokens, basp::plan::HeadChunk chunk, Direction dir, const Tensors& in,
                Tensors& out) {
  for (int32_t t = 0; t < grp.n; ++t) {
    for (int64_t l = 0; l < grp.k; ++l) {
      const Geometry g = grp.plans[l].call(tokens, chunk, dir).at(t);
      std::vector<basp::layout::RowPlace> places(grp.k);
      if (dir == Direction::kScatter) {
        for (int64_t j = 0; j < grp.k; ++j) places[j] = {out[j][t].data(), true};
        basp::layout::scatter_rows(g, in[l][t].data(), places.data(), false);
      } else {
        for (int64_t j = 0; j < grp.k; ++j) places[j] = {const_cast<std::byte*>(in[j][t].data()), true};
        basp::layout::gather_rows(g, places.data(), out[l][t].data(), grp.dtype, false);
      }
    }
  }
}

// Poisoned tensors of every position: the sequence-sharded side (seq) or the head-sharded one.
Tensors poisoned(const Group& grp, int64_t tokens, bool seq) {
  Tensors out(grp.k);
  for (int64_t l = 0; l < grp.k; ++l) {
    const basp::plan::CallGeometry c = grp.plans[l].call(tokens);
    for (int32_t t = 0; t < grp.n; ++t) {
      out[l].emplace_back(static_cast<size_t>(seq ? c.seq_bytes[t] : c.head_bytes[t]), std::byte{kPoison});
    }
  }
  return out;
}

// Inputs that are small integers of the dtype, a function of (position, tensor, element): a wrong byte, a missing
// one or a sum over the wrong contributions compares unequal, and every sum is exact.
Tensors inputs(const Group& grp, int64_t tokens, bool seq, int64_t elem) {
  Tensors in = poisoned(grp, tokens, seq);
  for (int64_t l = 0; l < grp.k; ++l) {
    for (int32_t t = 0; t < grp.n; ++t) {
      Bytes& b = in[l][t];
      for (size_t e = 0; e * elem < b.size(); ++e) {
        const int32_t v = static_cast<int32_t>(basp::test::pattern_byte(5, t, l, seq ? 1 : 0, 0, 0, e) % 61) - 30;
        basp::test::write_small_int(grp.dtype, b.data() + e * elem, v);
      }
    }
  }
  return in;
}

// Every chunk of a round of C, in order: the kernel bodies against the host copies after each; returns the
// kernels' outputs at the round's end.
Tensors round_of(const Group& grp, bool packed, int64_t tokens, int32_t count, Direction dir, const Tensors& in) {
  const bool scatter = dir == Direction::kScatter;
  std::vector<PackedWorkspace> ws;
  std::vector<Bytes> send, recv;
  std::vector<std::vector<int>> written;
  for (int64_t l = 0; l < grp.k; ++l) {
    const Geometry* g = grp.plans[l].tensors.data();
    ws.push_back(packed ? basp::layout::make_packed_workspace(g, grp.n)
                        : basp::layout::make_slotted_workspace(g, grp.n));
    send.emplace_back(static_cast<size_t>(ws[l].bytes()), std::byte{kPoison});
    recv.emplace_back(static_cast<size_t>(ws[l].bytes()), std::byte{kPoison});
    written.emplace_back(recv[l].size(), 0);
  }
  Tensors kernel = poisoned(grp, tokens, !scatter);
  Tensors host = kernel;
  for (int32_t c = 0; c < count; ++c) {
    INFO("chunk " << c << " of " << count << (scatter ? " scatter" : " gather") << (packed ? " peer-major" : ""));
    kernel_chunk(grp, ws, tokens, {c, count}, dir, in, kernel, send, recv, written);
    host_chunk(grp, tokens, {c, count}, dir, in, host);
    for (int64_t l = 0; l < grp.k; ++l)
      for (int32_t t = 0; t < grp.n; ++t) REQUIRE(kernel[l][t] == host[l][t]);
  }
  for (int64_t l = 0; l < grp.k; ++l) REQUIRE(*std::max_element(written[l].begin(), written[l].end()) <= 1);
  return kernel;
}

}  // namespace

TEST_CASE("kernel body on the host: every head chunk equals the host copies', the round the whole exchange",
          "[row_copy][head_chunks]") {
  const int32_t dtypes[] = {BASP_DTYPE_FP16, BASP_DTYPE_BF16, BASP_DTYPE_FP32, BASP_DTYPE_FP64};
  const int64_t sizes[] = {2, 2, 4, 8};
  int rounds = 0;
  for (const ChunkShape& shape : chunk_shapes()) {
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD, BASP_LAYOUT_THD}) {
      for (int d = 0; d < 4; ++d) {
        const Group grp = make_group(shape, layout, dtypes[d], sizes[d]);
        // THD: an execute of fewer tokens than the capacity, in the capacity's workspace.
        const int64_t tokens = layout == BASP_LAYOUT_THD ? shape.tokens - 1 : shape.seq_len;
        bool uniform = layout != BASP_LAYOUT_THD;
        for (const Geometry& g : grp.plans[0].tensors) uniform = uniform && g.uniform();
        const int32_t max = basp::plan::max_head_chunks(grp.plans[0]);
        std::vector<int32_t> counts{1, 2, 3, max};
        counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int32_t c) { return c > max; }), counts.end());
        std::sort(counts.begin(), counts.end());
        counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
        INFO(shape.name << ", layout " << layout << ", dtype " << dtypes[d] << ", max chunks " << max);
        const Tensors seq = inputs(grp, tokens, true, sizes[d]);
        const Tensors head = inputs(grp, tokens, false, sizes[d]);
        Tensors whole_head = poisoned(grp, tokens, false);
        Tensors whole_seq = poisoned(grp, tokens, true);
        host_chunk(grp, tokens, {}, Direction::kScatter, seq, whole_head);
        host_chunk(grp, tokens, {}, Direction::kGather, head, whole_seq);
        for (const bool packed : {false, true}) {
          if (packed && !uniform) continue;
          for (const int32_t count : counts) {
            INFO("C " << count);
            REQUIRE(round_of(grp, packed, tokens, count, Direction::kScatter, seq) == whole_head);
            REQUIRE(round_of(grp, packed, tokens, count, Direction::kGather, head) == whole_seq);
            ++rounds;
          }
        }
      }
    }
  }
  CHECK(rounds > 100);
}

TEST_CASE("kernel body on the host: head chunk pieces lie inside the whole chunk, disjoint over a round",
          "[row_copy][head_chunks]") {
  for (const ChunkShape& shape : chunk_shapes()) {
    const Group grp = make_group(shape, BASP_LAYOUT_BSHD, BASP_DTYPE_FP32, 4);
    const int32_t max = basp::plan::max_head_chunks(grp.plans[0]);
    for (const Direction dir : {Direction::kScatter, Direction::kGather}) {
      for (int32_t t = 0; t < grp.n; ++t) {
        for (int64_t s = 0; s < grp.k; ++s) {
          for (int64_t h = 0; h < grp.k; ++h) {
            const Geometry whole = grp.plans[0].tensors[t];
            std::vector<int> hits(static_cast<size_t>(whole.chunk_bytes(s, h)), 0);
            for (int32_t c = 0; c < max; ++c) {
              const Geometry g = grp.plans[0].call(shape.seq_len, {c, max}, dir).at(t);
              for (int64_t b = g.moved_offset(s, h); b < g.moved_offset(s, h) + g.moved_bytes(s, h); ++b) {
                REQUIRE(b < whole.chunk_bytes(s, h));
                ++hits[b];
              }
            }
            for (int x : hits) REQUIRE(x == 1);  // every byte of the whole chunk moves once per direction
          }
        }
      }
    }
  }
}
