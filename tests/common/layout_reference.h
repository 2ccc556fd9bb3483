// Host references for the device path's four row movements (layout/row_copy.h), tensor by tensor, with the
// packed workspace of layout/packed_workspace.h. The sequence side goes through the host implementation
// (layout/host_copy.h); the head side through the plain coordinate formulas below, which do not use Geometry's
// offsets at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "layout/geometry.h"
#include "layout/host_copy.h"
#include "layout/packed_workspace.h"

namespace basp::test {

using layout::Geometry;
using layout::PackedWorkspace;

// The uniform shapes the device path serves (layout::Geometry::uniform()): tokens and heads per rank.
inline int64_t s_loc(const Geometry& g) { return g.seq_len / g.k; }

struct RowCoord {
  int64_t b, s;  // local sequence, token inside the rank's shard
};

// Row r of a chunk -> (local sequence, local token), in the layout's order.
inline RowCoord row_coord(const Geometry& g, int64_t r) {
  if (g.layout == BASP_LAYOUT_BSHD) return {r / s_loc(g), r % s_loc(g)};
  return {r % g.b_loc, r / g.b_loc};
}

// Element index in the sequence-sharded tensor [b_loc][S/K][H][D] (or SBHD).
inline int64_t seq_index(const Geometry& g, int64_t b, int64_t s, int64_t h, int64_t d) {
  if (g.layout == BASP_LAYOUT_BSHD) return ((b * s_loc(g) + s) * g.heads + h) * g.head_dim + d;
  return ((s * g.b_loc + b) * g.heads + h) * g.head_dim + d;
}

// Element index in the head-sharded tensor [b_loc][S][H/K][D] (or SBHD); s_full is the token in 0..S-1.
inline int64_t head_index(const Geometry& g, int64_t b, int64_t s_full, int64_t h, int64_t d) {
  const int64_t hk = g.heads / g.k;
  if (g.layout == BASP_LAYOUT_BSHD) return ((b * s_loc(g) * g.k + s_full) * hk + h) * g.head_dim + d;
  return ((s_full * g.b_loc + b) * hk + h) * g.head_dim + d;
}

// Scatter pack: sequence-sharded -> every peer's chunk of tensor t.
inline void ref_scatter_pack(const Geometry& g, const PackedWorkspace& ws, int32_t t, const std::byte* seq,
                             std::byte* wire) {
  for (int64_t j = 0; j < g.k; ++j) layout::seq_to_place(g, seq, {wire + ws.chunk_offset(t, j), false}, j);
}

// Gather unpack: every peer's chunk of tensor t -> sequence-sharded.
inline void ref_gather_unpack(const Geometry& g, const PackedWorkspace& ws, int32_t t, const std::byte* wire,
                              std::byte* seq) {
  for (int64_t j = 0; j < g.k; ++j)
    layout::place_to_seq(g, {const_cast<std::byte*>(wire) + ws.chunk_offset(t, j), false}, seq, j);
}

// Scatter unpack: row r of peer j's chunk is token j*S/K + s of local sequence b, heads 0..H/K-1.
inline void ref_scatter_unpack(const Geometry& g, const PackedWorkspace& ws, int32_t t, const std::byte* wire,
                               std::byte* head) {
  const int64_t row = (g.heads / g.k) * g.head_dim * g.elem;
  for (int64_t j = 0; j < g.k; ++j) {
    for (int64_t r = 0; r < g.b_loc * s_loc(g); ++r) {
      const RowCoord c = row_coord(g, r);
      std::memcpy(head + head_index(g, c.b, j * s_loc(g) + c.s, 0, 0) * g.elem, wire + ws.chunk_offset(t, j) + r * row,
                  static_cast<size_t>(row));
    }
  }
}

// Gather pack: the mirror image of ref_scatter_unpack.
inline void ref_gather_pack(const Geometry& g, const PackedWorkspace& ws, int32_t t, const std::byte* head,
                            std::byte* wire) {
  const int64_t row = (g.heads / g.k) * g.head_dim * g.elem;
  for (int64_t j = 0; j < g.k; ++j) {
    for (int64_t r = 0; r < g.b_loc * s_loc(g); ++r) {
      const RowCoord c = row_coord(g, r);
      std::memcpy(wire + ws.chunk_offset(t, j) + r * row, head + head_index(g, c.b, j * s_loc(g) + c.s, 0, 0) * g.elem,
                  static_cast<size_t>(row));
    }
  }
}

inline void fill_random(std::vector<std::byte>& v, std::mt19937_64& rng) {
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
}

// One exchange shape: a group of k, b_loc sequences, s_loc tokens per rank, the tensors' head counts and, where
// given, their own head sizes (0 or none: head_dim).
struct Shape {
  int64_t k, b_loc, s_loc, head_dim;
  std::vector<int64_t> heads;
  std::vector<int64_t> head_dims = {};
};

// The shapes every layout x element size x direction runs on: odd head dims (1, 3, 72), one token per rank
// (S/K = 1), K = 1, odd K, GQA head counts, row lengths that are and are not multiples of 16 bytes; tensors of
// different head sizes in one exchange (multi-head latent attention's q and k of one size, v and the rotary key of
// others).
inline std::vector<Shape> odd_shapes() {
  return {
      {1, 2, 5, 72, {4, 2, 2}},
      {2, 1, 1, 1, {2}},
      {3, 2, 3, 3, {6, 3, 3}},
      {4, 3, 1, 72, {8, 4, 4}},
      {8, 1, 2, 128, {16, 8, 8}},
      {4, 2, 7, 64, {4}},
      {2, 2, 9, 8, {6, 2, 2}},
      {5, 1, 3, 3, {5, 10, 5, 5}},
      {4, 2, 3, 6, {8, 8, 8, 4}, {6, 6, 5, 3}},
      {2, 1, 2, 1, {2, 2, 2}, {3, 0, 8}},
  };
}

inline std::vector<Geometry> geometries(const Shape& s, int32_t layout, int64_t elem) {
  std::vector<Geometry> out;
  for (size_t t = 0; t < s.heads.size(); ++t) {
    const int64_t h = s.heads[t];
    Geometry g;
    g.layout = layout;
    g.b_loc = s.b_loc;
    g.seq_len = s.s_loc * s.k;
    g.k = s.k;
    g.heads = h;
    g.split_heads = h;
    g.head_dim = t < s.head_dims.size() && s.head_dims[t] > 0 ? s.head_dims[t] : s.head_dim;
    g.elem = elem;
    out.push_back(g);
  }
  return out;
}

}  // namespace basp::test
