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

}  // namespace basp::layout
