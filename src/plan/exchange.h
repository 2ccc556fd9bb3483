// The exchange plan of one rank: pure arithmetic from a validated descriptor and the rank's place in its group.
// It says which rows go to which peer (layout::Geometry per tensor) and where each peer's chunk lives in the
// plan's workspace; the transports only follow it.
#pragma once

#include <cstdint>
#include <vector>

#include "basp/basp.h"
#include "layout/geometry.h"

namespace basp::plan {

// A descriptor after validation: identical on every rank of a group.
struct ExchangeSpec {
  int32_t layout = BASP_LAYOUT_BSHD;
  int64_t elem_size = 0;
  int64_t seq_len = 0;
  int64_t head_dim = 0;
  std::vector<int64_t> num_heads;  // one per tensor
};

// Checks every field against the group size K; the error names the field and the value.
ExchangeSpec validate_spec(const basp_plan_desc_v1& desc, int32_t group_size);

struct ExchangePlan {
  ExchangeSpec spec;
  int32_t group_size = 0;       // K
  int32_t position = 0;         // l
  int64_t local_sequences = 0;  // b_loc
  std::vector<layout::Geometry> tensors;
  // Bytes this rank sends to the other ranks in one scatter (the same in one gather). The point-to-point path's
  // packed workspace holds exactly these: for each tensor, the K-1 chunks of the other peers, in peer order (own
  // slot skipped).
  int64_t bytes_sent = 0;
  std::vector<int64_t> tensor_workspace_offset;

  int32_t num_tensors() const { return static_cast<int32_t>(tensors.size()); }
  // The global heads of tensor t this rank holds on the head-sharded side: [head_begin, head_end).
  int64_t head_begin(int32_t t) const { return position * tensors[t].heads_per_rank(); }
  int64_t head_end(int32_t t) const { return (position + 1) * tensors[t].heads_per_rank(); }
  // Byte offset in the packed workspace of tensor t's chunk exchanged with peer j (j != position).
  int64_t workspace_offset(int32_t t, int32_t j) const {
    const int32_t slot = j < position ? j : j - 1;
    return tensor_workspace_offset[t] + slot * tensors[t].chunk_bytes();
  }
};

ExchangePlan make_exchange_plan(const ExchangeSpec& spec, int32_t group_size, int32_t position,
                                int64_t local_sequences);

}  // namespace basp::plan
