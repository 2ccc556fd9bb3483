// Host-side movement of rows between the sequence-sharded tensor, the head-sharded tensors and packed chunks
// (layout/geometry.h), and the summing gather of heads several positions hold (layout/sum_rows.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "layout/geometry.h"

namespace basp::layout {

// Where the rows of one position's chunk lie on the head side of a pass (scatter's destination, gather's source):
// position h's head-sharded tensor (`tensor`: row r at head_row_offset(h, me, r), its moved heads
// moved_skip_bytes(h) into it), or a packed chunk (row r at r * moved_row_bytes(h)). An entry for a position whose
// heads do not move is never touched.
struct RowPlace {
  std::byte* base = nullptr;
  bool tensor = false;

  std::byte* row(const Geometry& g, int64_t h, int64_t r) const {
    if (g.whole()) return base + (tensor ? g.head_row_offset(h, g.me, r) : r * g.head_row_bytes(h));
    return base + (tensor ? g.head_row_offset(h, g.me, r) + g.moved_skip_bytes(h) : r * g.moved_row_bytes(h));
  }
};

// One position's rows, sequence side of `me` <-> `place` (head position j): scatter's send side, and gather's
// receive side of an exchange in which no head is replicated. Rows contiguous on both sides move in one memcpy.
void seq_to_place(const Geometry& g, const std::byte* seq, RowPlace place, int64_t j);
void place_to_seq(const Geometry& g, RowPlace place, std::byte* seq, int64_t j);

// The whole group's rows in one row-major pass over the sequence side: for each row r, the heads of every position
// j, which are adjacent in the sequence-sharded tensor (places[j] for every j, the rank's own included). The
// sequence side is then read (scatter) or written (gather) front to back and each position's rows as a sequential
// stream, instead of K strided passes (measured on the CI machine: a strided pass over 1 KiB rows runs at 1/3 of
// memcpy's bandwidth). The gather sums a head several positions hold (sum_rows.h) and copies every other;
// `dtype` must then be summable. A head chunk's gather sums such a head in the chunk of its last contribution,
// over every holder in ascending position as the whole gather does: the holders' earlier contributions are read
// where their chunks left them (a packed place: the piece of the chunk a holder sent it in, at seq_rows *
// moved_skip_bytes from the whole exchange's piece; a tensor: the holder's head-sharded tensor). `streaming`:
// non-temporal stores for rows whose destination and size are 16-byte aligned (x86-64 only); for copies much larger
// than the cache; a head chunk with pieces under 1 KiB takes ordinary stores (faster there). Ends with a store
// fence, so the rows are visible before the caller signals peers.
void scatter_rows(const Geometry& g, const std::byte* seq, const RowPlace* places, bool streaming);
void gather_rows(const Geometry& g, const RowPlace* places, std::byte* seq, int32_t dtype, bool streaming);

// Head-sharded tensor of `me` <-> packed chunk of sequence position s's rows (contiguous blocks: a few memcpy
// calls; a head chunk: one per row; `streaming`: non-temporal stores, ending with a store fence).
void pack_head_rows(const Geometry& g, const std::byte* head, std::byte* wire, int64_t s, bool streaming = false);
void unpack_head_rows(const Geometry& g, const std::byte* wire, std::byte* head, int64_t s, bool streaming = false);

// Copies n bytes like memcpy; with non-temporal stores where `dst` and `n` are multiples of 16 bytes on x86-64.
// The caller issues stream_fence() before other threads or processes may read dst.
void copy_streaming(std::byte* dst, const std::byte* src, size_t n);
void stream_fence();

}  // namespace basp::layout
