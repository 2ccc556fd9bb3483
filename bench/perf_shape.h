// From a requested size to a tensor shape. "size" is the number of bytes per rank of the sequence-sharded
// tensors one iteration moves (for the Q/K/V scatter: Q + K + V on one rank before the exchange). Every rank
// holds T = B*S/N tokens of every tensor, whatever the grouping, so
//     size = T * D * elem * sum(heads),   S = N * T / B.
// S is rounded down to a multiple of N, so that the same S is valid for Ulysses (K = N) and for every BASP
// grouping (K divides N), and the row reports the bytes actually moved. Sizes too small for one token per
// sequence per rank round up to S = N; consecutive sizes that give the same S are measured once.
#pragma once

#include <cstdint>
#include <vector>

#include "perf_op.h"

namespace basp::bench {

struct RowShape {
  int64_t micro_batch = 0;      // B
  int64_t seq_len = 0;          // S
  int64_t tokens_per_rank = 0;  // T = B*S/N
  int64_t bytes = 0;            // per rank, = T * bytes_per_token
  int64_t count = 0;            // elements per rank
};

// Bytes of one token of every tensor of every exchange: D * elem * sum of heads. Throws ArgError on overflow.
int64_t bytes_per_token(const std::vector<Exchange>& exchanges, int64_t head_dim, int64_t elem);

// The rows of the sweep, B outermost, in the order of `micro_batches` and `sizes`. Throws ArgError when even the
// smallest shape (S = N) exceeds kMaxBytes.
std::vector<RowShape> shape_rows(const std::vector<int64_t>& sizes, const std::vector<int64_t>& micro_batches,
                                 int64_t world_size, int64_t token_bytes, int64_t elem);

}  // namespace basp::bench
