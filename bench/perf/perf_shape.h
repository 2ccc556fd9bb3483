// From a requested size to a tensor shape. "size" is the number of bytes per rank of the sequence-sharded
// tensors one iteration moves (for the Q/K/V scatter: Q + K + V on one rank before the exchange), on average over
// the ranks. The N ranks hold B*S tokens of every tensor in all, whatever the grouping, so
//     S = floor(N * size / (B * bytes_per_token)),   at least 1.
// S is not rounded: a group of K ranks splits each of its B/G sequences as torch.tensor_split does, so its first
// S mod K positions hold one token more, and a rank may hold none (S < K). The row reports the bytes of the rank
// holding the most, over the modes measured: (B/G) * ceil(S*G/N) tokens, Ulysses' (G = 1) when it runs, since the
// slowest rank is the one with the most bytes. Consecutive sizes that give the same S are measured once.
// THD rows (packed documents) take their tokens from the documents instead (thd_rows).
#pragma once

#include <cstdint>
#include <vector>

#include "perf_op.h"

namespace basp::bench {

struct RowShape {
  int64_t micro_batch = 0;  // B
  int64_t seq_len = 0;      // S; THD: the tokens of all documents of the micro-batch
  int64_t bytes = 0;        // the largest rank's sequence-sharded bytes of one iteration, over the modes
  int64_t count = 0;        // bytes / element size
};

// torch.tensor_split's rule as a plain formula: position j of `parts` gets items
// [j * (items / parts) + min(j, items % parts), ...). Independent of the library's basp_split, which it checks.
int64_t split_begin(int64_t items, int64_t parts, int64_t index);
int64_t split_count(int64_t items, int64_t parts, int64_t index);

// Bytes of one token of every tensor of every exchange: elem * the sum over the tensors of heads * head size (the
// tensor's own, else `head_dim`). Throws ArgError on overflow.
int64_t bytes_per_token(const std::vector<Exchange>& exchanges, int64_t head_dim, int64_t elem);

// The group counts G the modes use at micro-batch B over N ranks: Ulysses 1, BASP gcd(N, B); Ulysses first.
std::vector<int64_t> mode_groups(Mode mode, int64_t world_size, int64_t micro_batch);

// The most tokens of one tensor a rank holds: (B / G) sequences of ceil(S * G / N) tokens (position 0 of a group).
int64_t max_rank_tokens(int64_t seq_len, int64_t micro_batch, int64_t groups, int64_t world_size);

// The rows of the sweep, B outermost, in the order of `micro_batches` and `sizes`. Throws ArgError when even the
// smallest shape (S = 1) exceeds kMaxBytes, or a size gives a sequence length that overflows.
std::vector<RowShape> shape_rows(const std::vector<int64_t>& sizes, const std::vector<int64_t>& micro_batches,
                                 int64_t world_size, int64_t token_bytes, int64_t elem, Mode mode);

// THD: one row per B holding all documents' tokens; bytes and count are filled in once the documents are assigned
// to the groups of each mode (they depend on the assignment).
std::vector<RowShape> thd_rows(const std::vector<int64_t>& micro_batches, const std::vector<int64_t>& doc_lengths);

}  // namespace basp::bench
