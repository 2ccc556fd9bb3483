// The device path's index math on the CPU: the tiling of layout/row_tiles.h, the packed workspace, and the body
// of the CUDA pack/unpack kernel (layout::copy_tile, the very function the kernel runs) executed on the host for
// every (tile, thread) of a launch, bit-exact against the host implementation and the coordinate formulas.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "layout/packed_workspace.h"
#include "layout/row_copy.h"
#include "layout/row_tiles.h"
#include "layout_reference.h"
#include "pattern.h"
#include "split_reference.h"

using basp::layout::Geometry;
using basp::layout::PackedWorkspace;
using basp::layout::RowCopyArgs;
using basp::layout::TensorSide;
using basp::test::kPoison;

namespace {

// What the kernel does, on the host: every thread of every tile.
void run_on_host(const RowCopyArgs& a) {
  for (int64_t tile = 0; tile < a.num_tiles; ++tile)
    for (int32_t thread = 0; thread < basp::layout::kCopyThreads; ++thread) basp::layout::copy_tile(a, tile, thread);
}

// Bytes whose usable part starts `shift` bytes after a 64-byte boundary, so tests choose the alignment.
struct Buffer {
  std::vector<std::byte> storage;
  std::byte* data = nullptr;
  Buffer(int64_t bytes, int64_t shift, std::byte fill) : storage(static_cast<size_t>(bytes + shift + 64), fill) {
    auto p = reinterpret_cast<uintptr_t>(storage.data());
    data = reinterpret_cast<std::byte*>((p + 63) / 64 * 64 + static_cast<uintptr_t>(shift));
  }
};

}  // namespace

TEST_CASE("access width: the widest of 16/8/4/2/1 dividing the row length and every address", "[row_copy]") {
  using basp::layout::vec_bytes_for;
  CHECK(vec_bytes_for(256, 0x1000) == 16);
  CHECK(vec_bytes_for(6, 0x1000) == 2);
  CHECK(vec_bytes_for(144, 0x1000 | 4) == 4);
  CHECK(vec_bytes_for(3, 0) == 1);
  CHECK(vec_bytes_for(24, 0x2000) == 8);
  CHECK(vec_bytes_for(32, 0x2000 | 1) == 1);
}

// Any geometry (uneven tokens and heads, GQA), either side of the tensor.
Geometry random_general(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Geometry g;
  g.layout = static_cast<int32_t>(pick(0, 2));
  g.k = pick(1, 8);
  g.me = pick(0, g.k - 1);
  g.b_loc = g.layout == BASP_LAYOUT_THD ? 1 : pick(1, 3);
  g.seq_len = pick(1, 5 * g.k + 3);
  if (pick(0, 1) == 0) {
    g.heads = pick(1, 2 * g.k + 2);
    g.split_heads = g.heads;
  } else {
    g.heads = pick(1, 3);
    g.split_heads = g.heads * pick(1, 6);
  }
  g.head_dim = pick(1, 70);
  g.elem = int64_t{1} << pick(0, 3);
  return g;
}

TEST_CASE("tiling: every vector of every row of every peer belongs to exactly one thread", "[row_copy]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const Geometry g = random_general(rng);
    const bool head_side = trial % 2 == 1;
    const int32_t v = basp::layout::vec_bytes_for(basp::layout::row_unit_bytes(g), 0);
    const basp::layout::RowTiling tl = basp::layout::make_row_tiling(g, head_side, v, 0);
    INFO("trial " << trial << " K " << g.k << " me " << g.me << " S " << g.seq_len << " H " << g.heads << "/"
                  << g.split_heads << " head side " << head_side);
    REQUIRE(tl.lanes() <= basp::layout::kMaxLanesPerRow);
    REQUIRE(tl.rows_per_tile * tl.lanes() == basp::layout::kCopyThreads);
    // The tasks enumerate every peer's rows once: on the sequence side K chunks of the rank's rows, on the head
    // side each peer's tokens.
    int64_t rows = 0;
    for (int64_t j = 0; j < g.k; ++j) rows += head_side ? g.seq_rows(j) : g.seq_rows(g.me);
    REQUIRE(tl.row_tasks == rows);
    if (tl.lane_shift > 0) REQUIRE(tl.vecs_per_row >= tl.lanes() * basp::layout::kCopyUnroll);
    std::vector<int> hits(static_cast<size_t>(tl.row_tasks * tl.vecs_per_row), 0);
    for (int64_t tile = 0; tile < tl.num_tiles; ++tile) {
      for (int32_t thread = 0; thread < basp::layout::kCopyThreads; ++thread) {
        const int64_t task = tl.task_of(tile, thread);
        if (task >= tl.row_tasks) continue;
        const int64_t j = tl.peer_of(g, task);
        const int64_t r = tl.row_of(g, task, j);
        REQUIRE(j >= 0);
        REQUIRE(j < g.k);
        REQUIRE(r >= 0);
        REQUIRE(r < (head_side ? g.seq_rows(j) : g.seq_rows(g.me)));
        const int64_t vecs = tl.row_bytes(g, j) / v;
        REQUIRE(vecs * v == tl.row_bytes(g, j));
        REQUIRE(vecs <= tl.vecs_per_row);
        for (int64_t c = tl.lane_of(thread); c < vecs; c += tl.lanes()) ++hits[task * tl.vecs_per_row + c];
      }
    }
    for (int64_t task = 0; task < tl.row_tasks; ++task) {
      int64_t j = 0;  // the peer of the task, counted independently
      int64_t before = 0;
      while (before + (head_side ? g.seq_rows(j) : g.seq_rows(g.me)) <= task) {
        before += head_side ? g.seq_rows(j) : g.seq_rows(g.me);
        ++j;
      }
      const int64_t vecs = (head_side ? g.head_row_bytes(g.me) : g.head_row_bytes(j)) / v;
      for (int64_t c = 0; c < tl.vecs_per_row; ++c) REQUIRE(hits[task * tl.vecs_per_row + c] == (c < vecs ? 1 : 0));
    }
  }
}

TEST_CASE("packed workspace: aligned, disjoint tensor chunks, one equal block per peer", "[row_copy]") {
  for (const auto& shape : basp::test::odd_shapes()) {
    for (int64_t elem : {1, 2, 4, 8}) {
      const auto geoms = basp::test::geometries(shape, BASP_LAYOUT_BSHD, elem);
      const auto n = static_cast<int32_t>(geoms.size());
      const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
      REQUIRE(ws.peer_stride[0] % basp::layout::kWireAlign == 0);
      int64_t end = 0;
      for (int32_t t = 0; t < n; ++t) {
        REQUIRE(ws.tensor_offset[t] % basp::layout::kWireAlign == 0);
        REQUIRE(ws.tensor_offset[t] >= end);
        end = ws.tensor_offset[t] + geoms[t].chunk_bytes(0, 0);
        REQUIRE(ws.peer_stride[t] == ws.peer_stride[0]);
        REQUIRE(ws.chunk_offset(t, shape.k - 1) == (shape.k - 1) * ws.peer_stride[0] + ws.tensor_offset[t]);
      }
      REQUIRE(end <= ws.peer_stride[0]);
      REQUIRE(ws.peer_stride[0] - end < basp::layout::kWireAlign);
      REQUIRE(ws.bytes() == shape.k * ws.peer_stride[0]);
    }
  }
}

TEST_CASE("slotted workspace: every chunk of either direction fits its slot, aligned and disjoint", "[row_copy]") {
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<Geometry> geoms;
    const Geometry first = random_general(rng);
    for (int t = 0; t < 3; ++t) {
      Geometry g = random_general(rng);
      g.layout = first.layout;
      g.k = first.k;
      g.me = first.me;
      g.b_loc = first.b_loc;
      g.seq_len = first.seq_len;
      geoms.push_back(g);
    }
    const PackedWorkspace ws = basp::layout::make_slotted_workspace(geoms.data(), 3);
    int64_t end = 0;
    for (int32_t t = 0; t < 3; ++t) {
      const Geometry& g = geoms[t];
      REQUIRE(ws.peer_stride[t] % basp::layout::kWireAlign == 0);
      for (int64_t j = 0; j < g.k; ++j) {
        REQUIRE(ws.chunk_offset(t, j) % basp::layout::kWireAlign == 0);
        REQUIRE(ws.chunk_offset(t, j) >= end);
        // Any call of fewer tokens (THD) fits too.
        for (const int64_t tokens : {g.seq_len, g.seq_len / 2, int64_t{0}}) {
          Geometry c = g;
          c.seq_len = tokens;
          REQUIRE(c.chunk_bytes(g.me, j) <= ws.peer_stride[t]);
          REQUIRE(c.chunk_bytes(j, g.me) <= ws.peer_stride[t]);
        }
        end = ws.chunk_offset(t, j) + std::max(g.chunk_bytes(g.me, j), g.chunk_bytes(j, g.me));
      }
    }
    REQUIRE(end <= ws.bytes());
  }
}

TEST_CASE("kernel body on the host: every layout, element size and direction, bit-exact", "[row_copy]") {
  std::mt19937_64 rng(2024);
  for (const auto& shape : basp::test::odd_shapes()) {
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
      for (int64_t elem : {1, 2, 4, 8}) {
        for (int64_t shift : {int64_t{0}, elem}) {  // aligned, then tensors off 16-byte alignment
          const auto geoms = basp::test::geometries(shape, layout, elem);
          const auto n = static_cast<int32_t>(geoms.size());
          const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
          const int64_t wire_bytes = ws.bytes();
          std::vector<Buffer> src, dst;
          std::vector<std::vector<std::byte>> expect(n);
          std::vector<const void*> src_ptr(n);
          std::vector<void*> dst_ptr(n);
          for (int32_t t = 0; t < n; ++t) {
            src.emplace_back(geoms[t].seq_tensor_bytes(0), shift, std::byte{0});
            dst.emplace_back(geoms[t].seq_tensor_bytes(0), shift, std::byte{kPoison});
            std::vector<std::byte> r(static_cast<size_t>(geoms[t].seq_tensor_bytes(0)));
            basp::test::fill_random(r, rng);
            std::memcpy(src[t].data, r.data(), r.size());
            src_ptr[t] = src[t].data;
            dst_ptr[t] = dst[t].data;
          }
          INFO("K " << shape.k << " D " << shape.head_dim << " layout " << layout << " elem " << elem << " shift "
                    << shift);

          // Pack (tensor -> wire) from either side.
          for (TensorSide side : {TensorSide::kSeq, TensorSide::kHead}) {
            Buffer wire(wire_bytes, 0, std::byte{kPoison});
            std::vector<std::byte> want(static_cast<size_t>(wire_bytes), std::byte{kPoison});
            for (int32_t t = 0; t < n; ++t) {
              if (side == TensorSide::kSeq)
                basp::test::ref_scatter_pack(geoms[t], ws, t, src[t].data, want.data());
              else
                basp::test::ref_gather_pack(geoms[t], ws, t, src[t].data, want.data());
            }
            run_on_host(basp::layout::make_row_copy_args(geoms.data(), n, ws, side, true, src_ptr.data(), wire.data));
            // Padding between chunks is never written: it stays poisoned on both sides.
            REQUIRE(std::memcmp(wire.data, want.data(), want.size()) == 0);
          }
          // Unpack (wire -> tensor) to either side.
          for (TensorSide side : {TensorSide::kSeq, TensorSide::kHead}) {
            Buffer wire(wire_bytes, 0, std::byte{0});
            std::vector<std::byte> r(static_cast<size_t>(wire_bytes));
            basp::test::fill_random(r, rng);
            std::memcpy(wire.data, r.data(), r.size());
            for (int32_t t = 0; t < n; ++t) {
              std::memset(dst[t].data, static_cast<int>(kPoison), static_cast<size_t>(geoms[t].seq_tensor_bytes(0)));
              expect[t].assign(static_cast<size_t>(geoms[t].seq_tensor_bytes(0)), std::byte{kPoison});
              if (side == TensorSide::kSeq)
                basp::test::ref_gather_unpack(geoms[t], ws, t, wire.data, expect[t].data());
              else
                basp::test::ref_scatter_unpack(geoms[t], ws, t, wire.data, expect[t].data());
            }
            run_on_host(basp::layout::make_row_copy_args(geoms.data(), n, ws, side, false, dst_ptr.data(), wire.data));
            for (int32_t t = 0; t < n; ++t) {
              REQUIRE(std::memcmp(dst[t].data, expect[t].data(), expect[t].size()) == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("kernel body on the host: a whole group's scatter then gather, bit-exact on global coordinates",
          "[row_copy]") {
  using basp::test::pattern_byte;
  const uint64_t seed = 77;
  for (const auto& shape : basp::test::odd_shapes()) {
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
      for (int64_t elem : {1, 2, 8}) {
        const auto geoms = basp::test::geometries(shape, layout, elem);
        const auto n = static_cast<int32_t>(geoms.size());
        const int64_t k = shape.k;
        const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
        // seq[l][t]: rank l's sequence-sharded tensor t, a function of global coordinates.
        std::vector<std::vector<std::vector<std::byte>>> seq(k), head(k), back(k);
        for (int64_t l = 0; l < k; ++l) {
          for (int32_t t = 0; t < n; ++t) {
            const Geometry& g = geoms[t];
            std::vector<std::byte> s(static_cast<size_t>(g.seq_tensor_bytes(0)));
            for (int64_t b = 0; b < g.b_loc; ++b)
              for (int64_t tok = 0; tok < basp::test::s_loc(g); ++tok)
                for (int64_t h = 0; h < g.heads; ++h)
                  for (int64_t d = 0; d < g.head_dim; ++d)
                    for (int64_t e = 0; e < elem; ++e)
                      s[basp::test::seq_index(g, b, tok, h, d) * elem + e] =
                          std::byte{pattern_byte(seed, t, b, l * basp::test::s_loc(g) + tok, h, d, e)};
            seq[l].push_back(std::move(s));
            head[l].emplace_back(static_cast<size_t>(g.seq_tensor_bytes(0)), std::byte{kPoison});
            back[l].emplace_back(static_cast<size_t>(g.seq_tensor_bytes(0)), std::byte{kPoison});
          }
        }
        auto exchange = [&](TensorSide from, std::vector<std::vector<std::vector<std::byte>>>& in, TensorSide to,
                            std::vector<std::vector<std::vector<std::byte>>>& out) {
          std::vector<std::vector<std::byte>> send(k), recv(k);
          for (int64_t l = 0; l < k; ++l) {
            send[l].assign(static_cast<size_t>(ws.bytes()), std::byte{kPoison});
            recv[l].assign(static_cast<size_t>(ws.bytes()), std::byte{kPoison});
            std::vector<const void*> p(n);
            for (int32_t t = 0; t < n; ++t) p[t] = in[l][t].data();
            run_on_host(basp::layout::make_row_copy_args(geoms.data(), n, ws, from, true, p.data(), send[l].data()));
          }
          for (int64_t i = 0; i < k; ++i)  // all-to-all: block j of rank i's send lands as block i of rank j's recv
            for (int64_t j = 0; j < k; ++j)
              std::memcpy(recv[j].data() + i * ws.peer_stride[0], send[i].data() + j * ws.peer_stride[0],
                          static_cast<size_t>(ws.peer_stride[0]));
          for (int64_t l = 0; l < k; ++l) {
            std::vector<const void*> p(n);
            for (int32_t t = 0; t < n; ++t) p[t] = out[l][t].data();
            run_on_host(basp::layout::make_row_copy_args(geoms.data(), n, ws, to, false, p.data(), recv[l].data()));
          }
        };
        exchange(TensorSide::kSeq, seq, TensorSide::kHead, head);
        for (int64_t l = 0; l < k; ++l) {
          for (int32_t t = 0; t < n; ++t) {
            const Geometry& g = geoms[t];
            const int64_t hk = g.heads / k;
            for (int64_t b = 0; b < g.b_loc; ++b)
              for (int64_t tok = 0; tok < basp::test::s_loc(g) * k; ++tok)
                for (int64_t h = 0; h < hk; ++h)
                  for (int64_t d = 0; d < g.head_dim; ++d)
                    for (int64_t e = 0; e < elem; ++e)
                      REQUIRE(head[l][t][basp::test::head_index(g, b, tok, h, d) * elem + e] ==
                              std::byte{pattern_byte(seed, t, b, tok, l * hk + h, d, e)});
          }
        }
        exchange(TensorSide::kHead, head, TensorSide::kSeq, back);
        for (int64_t l = 0; l < k; ++l)
          for (int32_t t = 0; t < n; ++t) REQUIRE(back[l][t] == seq[l][t]);
      }
    }
  }
}

// The general device path on the host: K virtual ranks, each with its own geometry (seen from its position) and
// slotted workspace, the kernel bodies (copy_tile, sum_unpack_task) for every (tile, thread) and every (row, head)
// task, and the grouped send/recv emulated by copies of each chunk's own size. Uneven tokens and heads, GQA with
// replicated KV heads, every layout; the scatter against the coordinate formulas, the gather against the input
// (nothing replicated) or the exact sums of small integers (replicated heads).
TEST_CASE("kernel body on the host: the general path's scatter and summing gather, bit-exact", "[row_copy]") {
  using basp::test::pattern_byte;
  std::mt19937_64 rng(31);
  const int32_t dtypes[] = {BASP_DTYPE_FP16, BASP_DTYPE_BF16, BASP_DTYPE_FP32, BASP_DTYPE_FP64};
  const int64_t sizes[] = {2, 2, 4, 8};
  for (int trial = 0; trial < 150; ++trial) {
    Geometry base = random_general(rng);
    const int32_t dtype = dtypes[trial % 4];
    base.elem = sizes[trial % 4];
    const int64_t k = base.k;
    const basp::test::GeometryRef<Geometry> ref(base);
    const uint64_t seed = rng();
    INFO("trial " << trial << " layout " << base.layout << " K " << k << " S " << base.seq_len << " H " << base.heads
                  << "/" << base.split_heads << " D " << base.head_dim);
    std::vector<Geometry> g(k);
    std::vector<PackedWorkspace> ws(k);
    std::vector<std::vector<std::byte>> seq(k), head(k), back(k), send(k), recv(k);
    for (int64_t l = 0; l < k; ++l) {
      g[l] = base.seen_from(l);
      ws[l] = basp::layout::make_slotted_workspace(&g[l], 1);
      seq[l].resize(static_cast<size_t>(g[l].seq_tensor_bytes(l)));
      for (int64_t b = 0; b < base.b_loc; ++b)
        for (int64_t s = 0; s < ref.tc(l); ++s)
          for (int64_t h = 0; h < base.heads; ++h)
            for (int64_t d = 0; d < base.head_dim; ++d)
              for (int64_t e = 0; e < base.elem; ++e)
                seq[l][ref.seq_index(l, b, s, h, d) * base.elem + e] =
                    std::byte{pattern_byte(seed, 0, b, ref.tok[l] + s, h, d, e)};
      head[l].assign(static_cast<size_t>(g[l].head_tensor_bytes(l)), std::byte{kPoison});
      back[l].assign(seq[l].size(), std::byte{kPoison});
    }
    // One direction: pack on every rank, chunk (i -> j) of its own size, unpack (plain or summing).
    auto exchange = [&](bool scatter) {
      for (int64_t l = 0; l < k; ++l) {
        send[l].assign(static_cast<size_t>(ws[l].bytes()), std::byte{kPoison});
        recv[l].assign(static_cast<size_t>(ws[l].bytes()), std::byte{kPoison});
        const void* in[1] = {scatter ? seq[l].data() : head[l].data()};
        run_on_host(basp::layout::make_row_copy_args(&g[l], 1, ws[l], scatter ? TensorSide::kSeq : TensorSide::kHead,
                                                     true, in, send[l].data()));
      }
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const int64_t bytes = scatter ? base.chunk_bytes(i, j) : base.chunk_bytes(j, i);
          if (bytes == 0) continue;
          std::memcpy(recv[j].data() + ws[j].chunk_offset(0, i), send[i].data() + ws[i].chunk_offset(0, j),
                      static_cast<size_t>(bytes));
        }
      for (int64_t l = 0; l < k; ++l) {
        if (scatter || !base.replicated()) {
          void* out[1] = {scatter ? head[l].data() : back[l].data()};
          run_on_host(basp::layout::make_row_copy_args(&g[l], 1, ws[l], scatter ? TensorSide::kHead : TensorSide::kSeq,
                                                       false, out, recv[l].data()));
          continue;
        }
        basp::layout::SumUnpackArgs a;
        a.geom = g[l];
        a.dtype = dtype;
        a.seq = reinterpret_cast<unsigned char*>(back[l].data());
        a.wire = reinterpret_cast<const unsigned char*>(recv[l].data());
        a.workspace = ws[l];
        for (int64_t task = 0; task < a.num_tasks(); ++task)
          for (int32_t thread = 0; thread < 5; ++thread) basp::layout::sum_unpack_task(a, task, thread, 5);
      }
    };
    exchange(true);
    for (int64_t m = 0; m < k; ++m)
      for (int64_t b = 0; b < base.b_loc; ++b)
        for (int64_t s = 0; s < base.seq_len; ++s)
          for (int64_t i = 0; i < ref.hc(m); ++i)
            for (int64_t d = 0; d < base.head_dim; ++d)
              for (int64_t e = 0; e < base.elem; ++e)
                REQUIRE(head[m][ref.head_index(m, b, s, i, d) * base.elem + e] ==
                        std::byte{pattern_byte(seed, 0, b, s, ref.heads[m].begin + i, d, e)});
    const bool summing = base.replicated();
    auto contribution = [&](int64_t m, int64_t b, int64_t s, int64_t h, int64_t d) {
      return static_cast<int32_t>(pattern_byte(seed, 1, m, b, s, h, d) % 17) - 8;
    };
    if (summing) {
      for (int64_t m = 0; m < k; ++m)
        for (int64_t b = 0; b < base.b_loc; ++b)
          for (int64_t s = 0; s < base.seq_len; ++s)
            for (int64_t i = 0; i < ref.hc(m); ++i)
              for (int64_t d = 0; d < base.head_dim; ++d)
                basp::test::write_small_int(dtype, head[m].data() + ref.head_index(m, b, s, i, d) * base.elem,
                                            contribution(m, b, s, ref.heads[m].begin + i, d));
    }
    exchange(false);
    for (int64_t l = 0; l < k; ++l) {
      if (!summing) {
        REQUIRE(back[l] == seq[l]);
        continue;
      }
      std::vector<std::byte> want(static_cast<size_t>(base.elem));
      for (int64_t b = 0; b < base.b_loc; ++b)
        for (int64_t s = 0; s < ref.tc(l); ++s)
          for (int64_t h = 0; h < base.heads; ++h)
            for (int64_t d = 0; d < base.head_dim; ++d) {
              int32_t sum = 0;
              for (int64_t m = 0; m < k; ++m) {
                if (ref.heads[m].holds(h)) sum += contribution(m, b, ref.tok[l] + s, h, d);
              }
              basp::test::write_small_int(dtype, want.data(), sum);
              REQUIRE(std::memcmp(back[l].data() + ref.seq_index(l, b, s, h, d) * base.elem, want.data(),
                                  static_cast<size_t>(base.elem)) == 0);
            }
    }
  }
}
