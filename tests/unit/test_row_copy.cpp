// The device path's index math on the CPU: the tiling of layout/row_tiles.h, the packed workspace, and the body
// of the CUDA pack/unpack kernel (layout::copy_tile, the very function the kernel runs) executed on the host for
// every (tile, thread) of a launch, bit-exact against the host implementation and the coordinate formulas.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "layout/packed_workspace.h"
#include "layout/row_copy.h"
#include "layout/row_tiles.h"
#include "layout_reference.h"
#include "pattern.h"

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

TEST_CASE("tiling: every vector of every row of every peer belongs to exactly one thread", "[row_copy]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    Geometry g;
    g.layout = static_cast<int32_t>(pick(0, 1));
    g.k = pick(1, 8);
    g.b_loc = pick(1, 3);
    g.seq_len = pick(1, 40) * g.k;
    g.heads = g.k * pick(1, 4);
    g.split_heads = g.heads;
    g.head_dim = pick(1, 300);
    g.elem = int64_t{1} << pick(0, 3);
    const int32_t v = basp::layout::vec_bytes_for(g.head_row_bytes(0), 0);
    const basp::layout::RowTiling tl = basp::layout::make_row_tiling(g, v, 0);
    REQUIRE(tl.lanes() <= basp::layout::kMaxLanesPerRow);
    REQUIRE(tl.rows_per_tile * tl.lanes() == basp::layout::kCopyThreads);
    REQUIRE(tl.vecs_per_row * v == g.head_row_bytes(0));
    // A lane gets at least kCopyUnroll vectors whenever the row has enough for two lanes.
    if (tl.lane_shift > 0) REQUIRE(tl.vecs_per_row >= tl.lanes() * basp::layout::kCopyUnroll);
    std::vector<int> hits(static_cast<size_t>(tl.row_tasks * tl.vecs_per_row), 0);
    for (int64_t tile = 0; tile < tl.num_tiles; ++tile) {
      for (int32_t thread = 0; thread < basp::layout::kCopyThreads; ++thread) {
        const int64_t task = tl.task_of(tile, thread);
        if (task >= tl.row_tasks) continue;
        REQUIRE(tl.peer_of(task) * tl.rows + tl.row_of(task) == task);
        for (int64_t c = tl.lane_of(thread); c < tl.vecs_per_row; c += tl.lanes()) ++hits[task * tl.vecs_per_row + c];
      }
    }
    for (int h : hits) REQUIRE(h == 1);
  }
}

TEST_CASE("packed workspace: aligned, disjoint tensor chunks, one equal block per peer", "[row_copy]") {
  for (const auto& shape : basp::test::odd_shapes()) {
    for (int64_t elem : {1, 2, 4, 8}) {
      const auto geoms = basp::test::geometries(shape, BASP_LAYOUT_BSHD, elem);
      const auto n = static_cast<int32_t>(geoms.size());
      const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
      REQUIRE(ws.peer_stride % basp::layout::kWireAlign == 0);
      int64_t end = 0;
      for (int32_t t = 0; t < n; ++t) {
        REQUIRE(ws.tensor_offset[t] % basp::layout::kWireAlign == 0);
        REQUIRE(ws.tensor_offset[t] >= end);
        end = ws.tensor_offset[t] + geoms[t].chunk_bytes(0, 0);
        REQUIRE(ws.chunk_offset(t, shape.k - 1) == (shape.k - 1) * ws.peer_stride + ws.tensor_offset[t]);
      }
      REQUIRE(end <= ws.peer_stride);
      REQUIRE(ws.peer_stride - end < basp::layout::kWireAlign);
    }
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
          const int64_t wire_bytes = ws.bytes(shape.k);
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
            send[l].assign(static_cast<size_t>(ws.bytes(k)), std::byte{kPoison});
            recv[l].assign(static_cast<size_t>(ws.bytes(k)), std::byte{kPoison});
            std::vector<const void*> p(n);
            for (int32_t t = 0; t < n; ++t) p[t] = in[l][t].data();
            run_on_host(basp::layout::make_row_copy_args(geoms.data(), n, ws, from, true, p.data(), send[l].data()));
          }
          for (int64_t i = 0; i < k; ++i)  // all-to-all: block j of rank i's send lands as block i of rank j's recv
            for (int64_t j = 0; j < k; ++j)
              std::memcpy(recv[j].data() + i * ws.peer_stride, send[i].data() + j * ws.peer_stride,
                          static_cast<size_t>(ws.peer_stride));
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
