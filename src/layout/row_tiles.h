// How the row-copy kernels split an exchange into work: tiles of rows, lanes inside a row, access width.
//
// A *row task* q of tensor t is one row of one peer's chunk, peer-major (the rows of a tile are consecutive rows of
// one chunk): on the sequence side every peer's chunk has the rank's seq_rows rows (peer j = q / rows, row
// r = q % rows) and the row length varies with the peer's heads; on the head side peer j's chunk has seq_rows(j)
// rows (b_loc times its tokens: peer j = the position holding token q / b_loc) of the rank's own row length. A *tile*
// is rows_per_tile consecutive row tasks of one tensor, copied by the kCopyThreads threads of one CTA: each row gets
// 2^lane_shift lanes, and lane c copies the vectors c, c + lanes, c + 2*lanes, ... of the row, kCopyUnroll at a time so
// that several loads are in flight per thread. The row's offsets are computed once per thread from layout::Geometry and
// then reused for every vector of the row. Tiles of all tensors are numbered one after the other so that a single
// launch covers Q, K and V.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/split.h"
#include "layout/geometry.h"

namespace basp::layout {

constexpr int32_t kCopyThreads = 256;
// Vectors each lane loads before it stores them. A build-time knob (docs/gpu.md, "Tuning") so that variants can be
// measured against each other with basp_pack_bandwidth; the host tiling and the kernel must see the same value.
#ifndef BASP_COPY_UNROLL
#define BASP_COPY_UNROLL 4
#endif
constexpr int32_t kCopyUnroll = BASP_COPY_UNROLL;
constexpr int32_t kMaxLanesPerRow = 32;
constexpr int32_t kMaxVecBytes = 16;

struct RowTiling {
  int32_t vec_bytes = 1;      // width of every access: 16, 8, 4, 2 or 1
  int32_t lane_shift = 0;     // lanes per row = 1 << lane_shift
  int32_t head_side = 0;      // 1: the tensor side is head-sharded (rows per peer vary), 0: sequence-sharded
  int64_t vecs_per_row = 0;   // the longest row's bytes / vec_bytes
  int64_t rows = 0;           // sequence side: rows of every peer's chunk
  int64_t row_tasks = 0;      // rows of all peers
  int64_t rows_per_tile = 0;  // kCopyThreads >> lane_shift
  int64_t first_tile = 0;     // index of this tensor's first tile in the launch
  int64_t num_tiles = 0;

  BASP_HOST_DEVICE int64_t lanes() const { return int64_t{1} << lane_shift; }
  // The row task thread `thread` of tile `tile` (counted inside this tensor) works on; >= row_tasks: none.
  BASP_HOST_DEVICE int64_t task_of(int64_t tile, int32_t thread) const {
    return tile * rows_per_tile + (thread >> lane_shift);
  }
  BASP_HOST_DEVICE int64_t lane_of(int32_t thread) const { return thread & (lanes() - 1); }
  // The peer and the row of a task. nvcc emits 32-bit hardware division for these (and Geometry's) 64-bit divisions
  // whenever the operands fit.
  BASP_HOST_DEVICE int64_t peer_of(const Geometry& g, int64_t task) const {
    return head_side ? detail::split_position(g.seq_len, g.k, task / g.b_loc) : task / rows;
  }
  BASP_HOST_DEVICE int64_t row_of(const Geometry& g, int64_t task, int64_t peer) const {
    return head_side ? task - g.b_loc * g.tok_begin(peer) : task - peer * rows;
  }
  // Bytes of the rows of `peer`'s chunk that move (a head chunk's geometry: the moved heads, Geometry::moved).
  BASP_HOST_DEVICE int64_t row_bytes(const Geometry& g, int64_t peer) const {
    return head_side ? g.moved_row_bytes(g.me) : g.moved_row_bytes(peer);
  }
};

// The widest access (16, 8, 4, 2 or 1 bytes) that divides the row length and every address bit pattern in
// `address_bits` (the OR of all base addresses and offsets the rows start from).
BASP_HOST_DEVICE int32_t vec_bytes_for(int64_t row_bytes, uint64_t address_bits) {
  const uint64_t bits = address_bits | static_cast<uint64_t>(row_bytes);
  int32_t v = kMaxVecBytes;
  while (v > 1 && (bits & static_cast<uint64_t>(v - 1)) != 0) v >>= 1;
  return v;
}

// Lanes per row: enough vectors per lane (kCopyUnroll) to keep loads in flight, at most one warp per row.
BASP_HOST_DEVICE int32_t lane_shift_for(int64_t vecs_per_row) {
  int32_t shift = 0;
  while ((int64_t{2} << shift) <= kMaxLanesPerRow && (int64_t{2} << shift) * kCopyUnroll <= vecs_per_row) ++shift;
  return shift;
}

// The access width for every row of tensor g on either side: it must divide every row's length and offset (all
// multiples of the head's bytes; in a uniform geometry moving whole rows, of the one row length).
BASP_HOST_DEVICE int64_t row_unit_bytes(const Geometry& g) {
  return g.uniform() && g.whole() ? g.head_row_bytes(g.me) : g.dim_bytes();
}

BASP_HOST_DEVICE RowTiling make_row_tiling(const Geometry& g, bool head_side, int32_t vec_bytes, int64_t first_tile) {
  RowTiling t;
  t.vec_bytes = vec_bytes;
  t.head_side = head_side ? 1 : 0;
  int64_t longest = g.moved_row_bytes(g.me);
  if (!head_side) {
    for (int64_t j = 0; j < g.k; ++j) longest = longest > g.moved_row_bytes(j) ? longest : g.moved_row_bytes(j);
  }
  t.vecs_per_row = longest / vec_bytes;
  t.lane_shift = lane_shift_for(t.vecs_per_row);
  t.rows = g.seq_rows(g.me);
  t.row_tasks = head_side ? g.b_loc * g.seq_len : g.k * t.rows;
  t.rows_per_tile = kCopyThreads >> t.lane_shift;
  t.first_tile = first_tile;
  t.num_tiles = (t.row_tasks + t.rows_per_tile - 1) / t.rows_per_tile;
  return t;
}

}  // namespace basp::layout
