// The exchange plan of one rank: pure arithmetic from a validated descriptor and the rank's place in its group.
// It says which rows go to which peer (layout::Geometry per tensor) and where each peer's chunk lives in the
// workspaces and staging regions of the paths; the transports only follow it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "basp/basp.h"
#include "common/direction.h"
#include "layout/geometry.h"

namespace basp::plan {

// A descriptor after validation: identical on every rank of a group.
struct ExchangeSpec {
  int32_t layout = BASP_LAYOUT_BSHD;
  int32_t dtype = BASP_DTYPE_UNSET;
  int64_t elem_size = 0;
  int64_t seq_len = 0;               // S; THD: the token capacity
  std::vector<int64_t> head_dims;    // one per tensor: its own or the descriptor's head_dim
  std::vector<int64_t> num_heads;    // one per tensor
  std::vector<int64_t> split_heads;  // one per tensor: the head count whose split it follows (num_heads or Hq)

  bool thd() const { return layout == BASP_LAYOUT_THD; }
};

// Checks every field of the descriptor; the error names the field and the value.
ExchangeSpec validate_spec(const basp_plan_desc_v1& desc);
// The same checks for a batch plan's tensors, whose batch sets the sequences: THD takes token_capacity 0 (each
// group's stream) and leaves seq_len 0; BSHD/SBHD as validate_spec.
ExchangeSpec validate_batch_tensors(const basp_plan_desc_v1& desc);

// Head chunk `index` of `count` of an exchange (plan/head_chunks.h): what one execute moves. Chunk 0 of 1 is the
// whole exchange, which every public execute moves; the control messages carry the chunk, so that ranks on
// different chunks of one exchange are a mismatch.
struct HeadChunk {
  int32_t index = 0;
  int32_t count = 1;
  bool whole() const { return count == 1; }
  bool operator==(const HeadChunk& o) const { return index == o.index && count == o.count; }
  bool operator!=(const HeadChunk& o) const { return !(*this == o); }
};

// The geometry of one execute of one head chunk, derived once (ExchangePlan::call) and handed down to the
// transport: its paths and the workspace offsets read it instead of deriving it again per tensor or per chunk.
// Each tensor's geometry carries the chunk (layout::Geometry::moved: the heads it moves per position).
struct CallGeometry {
  int64_t tokens = 0;  // per sequence (THD: of the stream)
  HeadChunk chunk;
  Direction direction = Direction::kScatter;  // whose heads a chunk moves (the whole exchange: both alike)
  int32_t num_tensors = 0;
  std::array<layout::Geometry, BASP_MAX_TENSORS> tensors{};  // at `tokens`
  std::array<int64_t, BASP_MAX_TENSORS> seq_bytes{};         // this rank's sequence-sharded side of each tensor
  std::array<int64_t, BASP_MAX_TENSORS> head_bytes{};        // this rank's head-sharded side of each tensor

  const layout::Geometry& at(int32_t t) const { return tensors[static_cast<size_t>(t)]; }
  // This rank's bytes of tensor t on the side an execute in `direction` reads (inputs) or writes (outputs).
  int64_t input_bytes(Direction direction, int32_t t) const {
    return direction == Direction::kScatter ? seq_bytes[static_cast<size_t>(t)] : head_bytes[static_cast<size_t>(t)];
  }
  int64_t output_bytes(Direction direction, int32_t t) const {
    return direction == Direction::kScatter ? head_bytes[static_cast<size_t>(t)] : seq_bytes[static_cast<size_t>(t)];
  }
};

struct ExchangePlan {
  ExchangeSpec spec;
  int32_t group_size = 0;       // K
  int32_t position = 0;         // l
  int64_t local_sequences = 0;  // b_loc (THD: 1, the group's stream)
  // Per tensor, at the plan's S (THD: at its capacity).
  std::vector<layout::Geometry> tensors;
  // Bytes this rank sends to the other ranks in one scatter (the same in one gather), at capacity: the minimum for
  // the routing (a replicated head goes once to each rank that holds it).
  int64_t bytes_sent = 0;
  bool replicated = false;  // some tensor has a head several positions hold

  int32_t num_tensors() const { return static_cast<int32_t>(tensors.size()); }
  int64_t capacity() const { return spec.seq_len; }
  // Tensor t's geometry for an execute of `tokens` tokens per sequence (THD: of the stream).
  layout::Geometry at(int32_t t, int64_t tokens) const {
    layout::Geometry g = tensors[static_cast<size_t>(t)];
    g.seq_len = tokens;
    return g;
  }

  // The geometry of an execute of `tokens` tokens per sequence (THD: of the stream) moving head chunk `chunk` of
  // an exchange in `direction`. Throws INVALID_ARGUMENT naming the chunk outside check_head_chunk's bounds.
  CallGeometry call(int64_t tokens, HeadChunk chunk = {}, Direction direction = Direction::kScatter) const {
    CallGeometry c;
    call(tokens, chunk, direction, c);
    return c;
  }
  // The same into `out` (the runtime's execute, which holds its geometry before it derives it: no copy).
  void call(int64_t tokens, HeadChunk chunk, Direction direction, CallGeometry& out) const;

  // The packed workspace of the p2p and cma paths on position `owner` (sized at capacity): for each tensor, the
  // chunks of the owner's sequence side for every other position, in position order. Byte offset of tensor t's
  // chunk for position j != owner in an execute whose tensor t has geometry `g` (CallGeometry::at), or of `tokens`
  // tokens. A head chunk's piece of it starts seq_rows(owner) * moved_skip_bytes(j) bytes in: the piece of the
  // rows of j's heads it moves, so the C chunks of one direction use disjoint bytes of the workspace.
  int64_t workspace_offset(int32_t owner, int32_t t, int32_t j, const layout::Geometry& g) const;
  int64_t workspace_offset(int32_t owner, int32_t t, int32_t j, int64_t tokens) const {
    return workspace_offset(owner, t, j, at(t, tokens));
  }
  int64_t workspace_bytes(int32_t owner) const { return workspace_base_[static_cast<size_t>(owner)].back(); }

  // The staging region of the staged path on position `owner` (sized at capacity), per tensor and direction: in a
  // scatter the owner's chunks for every position (its own slot unused), in a gather the rows of every position's
  // tokens of the owner's head-sharded input. Byte offset of tensor t's chunk for position j, in an execute whose
  // tensor t has geometry `g`; a head chunk's piece, as in the workspace, the piece of the rows of the heads it
  // moves (scatter: of position j's heads; gather: of the owner's).
  int64_t region_offset(int32_t owner, int32_t t, int32_t j, const layout::Geometry& g, Direction direction) const;
  int64_t region_bytes(int32_t owner) const { return region_base_[static_cast<size_t>(owner)].back(); }

  // Built by make_exchange_plan.
  std::vector<std::vector<int64_t>> held_before_;     // [t][j]: heads held by positions 0..j-1, j = 0..K
  std::vector<std::vector<int64_t>> workspace_base_;  // [owner][t]: tensor t's first byte; [owner][n]: the size
  std::vector<std::vector<int64_t>> region_base_;     // [owner][t], as above
};

// `local_sequences`: the sequences the group owns (ignored for THD, whose group holds one stream).
ExchangePlan make_exchange_plan(const ExchangeSpec& spec, int32_t group_size, int32_t position,
                                int64_t local_sequences);

}  // namespace basp::plan
