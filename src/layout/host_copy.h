// Host-side movement of rows between the sequence-sharded tensor, the head-sharded tensor and packed chunks.
// Each function copies exactly one peer's rows (see geometry.h) and merges rows that are contiguous on both
// sides into one memcpy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "layout/geometry.h"

namespace basp::layout {

// Sequence-sharded -> packed chunk for peer j (scatter, send side).
void pack_seq_rows(const Geometry& g, const std::byte* seq, std::byte* wire, int64_t j);
// Packed chunk from peer j -> sequence-sharded (gather, receive side).
void unpack_seq_rows(const Geometry& g, const std::byte* wire, std::byte* seq, int64_t j);
// Sequence-sharded -> head-sharded for the rank's own slice (scatter, j = l, no exchange).
void copy_seq_to_head(const Geometry& g, const std::byte* seq, std::byte* head, int64_t j);
// Head-sharded -> sequence-sharded for the rank's own slice (gather, j = l).
void copy_head_to_seq(const Geometry& g, const std::byte* head, std::byte* seq, int64_t j);

// The whole group's rows at once, when a rank can address every peer's head-sharded tensor (shared memory):
// `heads[j]` is the head-sharded tensor of group position j (heads[me] the rank's own). All rows of every
// peer are moved in row-major order: for each row r, the K head slices of one (sequence, token) pair, which are
// adjacent in the sequence-sharded tensor. The sequence side is then read (scatter) or written (gather) front to
// back and each peer's block as its own sequential stream, instead of K strided passes over the sequence side
// (measured on the CI machine: a strided pass over 1 KiB rows runs at 1/3 of memcpy's bandwidth).
// `streaming`: non-temporal stores for rows whose destination and size are 16-byte aligned (x86-64 only;
// elsewhere, and for other rows, memcpy); for copies much larger than the cache, where they save the read of
// each destination line. Ends with a store fence, so the rows are visible before the caller signals peers.
void scatter_rows_group(const Geometry& g, const std::byte* seq, std::byte* const* heads, int64_t me, bool streaming);
void gather_rows_group(const Geometry& g, const std::byte* const* heads, std::byte* seq, int64_t me, bool streaming);

// The same pass for a staging area: peer j's rows travel as a packed chunk `wire[j]` (row r at r * row_bytes),
// the rank's own slice goes straight between `seq` and its head-sharded tensor `head` (wire[me] is unused).
// Scatter's send side and gather's receive side.
void pack_seq_rows_group(const Geometry& g, const std::byte* seq, std::byte* const* wire, std::byte* head, int64_t me,
                         bool streaming);
void unpack_seq_rows_group(const Geometry& g, const std::byte* const* wire, const std::byte* head, std::byte* seq,
                           int64_t me, bool streaming);
// Head-sharded tensor <-> packed chunk of peer j's rows (contiguous blocks: a few memcpy calls; `streaming`:
// non-temporal stores, for tensors much larger than the cache, ending with a store fence).
void pack_head_rows(const Geometry& g, const std::byte* head, std::byte* wire, int64_t j, bool streaming = false);
void unpack_head_rows(const Geometry& g, const std::byte* wire, std::byte* head, int64_t j, bool streaming = false);

// Copies n bytes like memcpy; with non-temporal stores where `dst` and `n` are multiples of 16 bytes on x86-64.
// The caller issues stream_fence() before other threads or processes may read dst.
void copy_streaming(std::byte* dst, const std::byte* src, size_t n);
void stream_fence();

}  // namespace basp::layout
