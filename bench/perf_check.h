// Bit-exact check data for the perf binaries: every element is a function of its global coordinates (tensor,
// sequence, token, head, dim), as in tests/common/pattern.h, but hashed once per element instead of once per
// byte so that checking a 64 MiB tensor takes a fraction of a second. The offsets below are plain formulas,
// independent of the library's index math (src/layout/geometry.h).
#pragma once

#include <cstdint>

#include "basp/basp.h"

namespace basp::bench {

// What one rank holds of one tensor: sequences [first_sequence, +num_sequences), tokens [token_begin, +tokens),
// heads [head_begin, +heads), all of the head dim. The sequence-sharded form holds tokens [l*S/K, (l+1)*S/K) of
// every head; the head-sharded form holds all S tokens of heads [l*H/K, (l+1)*H/K).
struct Shard {
  basp_layout_t layout = BASP_LAYOUT_BSHD;
  int64_t elem = 0;
  int64_t head_dim = 0;
  int64_t first_sequence = 0;
  int64_t num_sequences = 0;
  int64_t token_begin = 0;
  int64_t tokens = 0;
  int64_t head_begin = 0;
  int64_t heads = 0;

  int64_t elements() const { return num_sequences * tokens * heads * head_dim; }
  int64_t bytes() const { return elements() * elem; }
  // Element offset of local (sequence b, token s, head h, dim d).
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return layout == BASP_LAYOUT_BSHD ? ((b * tokens + s) * heads + h) * head_dim + d
                                      : ((s * num_sequences + b) * heads + h) * head_dim + d;
  }
};

// The two forms of a tensor with `heads` heads on the rank `info` describes (info from basp_comm_query with
// seq_len = S): sequence-sharded (scatter input, gather output) and head-sharded (scatter output, gather input).
Shard seq_shard(const basp_rank_info_t& info, basp_layout_t layout, int64_t elem, int64_t head_dim, int64_t heads);
Shard head_shard(const basp_rank_info_t& info, basp_layout_t layout, int64_t elem, int64_t head_dim, int64_t heads);

constexpr uint8_t kCheckPoison = 0xA5;

// Writes the expected value of every element of `shard` of tensor `tensor_id`.
void fill_expected(const Shard& shard, uint64_t seed, int64_t tensor_id, void* data);
// Counts the elements of `data` that differ from the expected value.
int64_t count_wrong(const Shard& shard, uint64_t seed, int64_t tensor_id, const void* data);

}  // namespace basp::bench
