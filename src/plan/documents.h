// Documents to groups: the paper's Algorithm 2 for a packed (THD) micro-batch. Pure arithmetic, no I/O.
//
// A micro-batch of D documents (lengths[i] > 0 tokens each) is shared out over the layout's G groups, greedily:
// documents in decreasing length (ties: lower index first), each to the group with the fewest tokens so far, then
// the smallest sum of squared lengths (attention work), then the lowest group index. Longest-first greedy keeps
// the spread of the groups' token counts within one document's length: max - min <= the longest document.
// Group g's stream is its documents in ascending document index, and position l of the group holds tokens
// [split_begin(T, K, l), split_begin(T, K, l + 1)) of it (common/split.h: tensor_split's rule).
// When the greedy overflows a group under a capacity (a batch packed to within a document of G * capacity, which is
// what a packing data loader produces), the assignment is made by fill_bins instead (exact subset sums), and only
// when that finds none either is the batch refused.
// Every rank computes the same answer from the same lengths.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/groups.h"

namespace basp::plan {

// The budget group_documents gives fill_bins by default: about 0.1 s of host work at most.
constexpr int64_t kFillBinsBudget = int64_t{1} << 27;

struct DocumentAssignment {
  int32_t rank = 0;
  int32_t group_index = 0;          // g
  int32_t group_position = 0;       // l
  int32_t group_size = 0;           // K
  std::vector<int32_t> docs;        // group g's documents, ascending: the order of its stream
  std::vector<int64_t> cu_seqlens;  // docs.size() + 1 cumulative lengths, cu_seqlens[0] = 0
  int64_t stream_tokens = 0;        // T = cu_seqlens.back()
  int64_t token_begin = 0;          // this rank's tokens of the stream
  int64_t token_end = 0;
  int32_t first_doc = -1;        // index into docs of the document holding token_begin; -1 when no token
  int64_t first_doc_offset = 0;  // position of token_begin inside that document; 0 when no token
  int64_t max_seqlen = 0;        // the longest document of group g (0: none)
  int64_t max_group_tokens = 0;  // the largest stream of all groups
  double imbalance = 1.0;        // max_group_tokens / (total tokens / G); 1.0 when there is no token
};

// The documents of each of `num_groups` groups, ascending, by the greedy rule above (fill_bins when the greedy
// overflows). `capacity` (> 0, or 0 for none) is the most tokens a group may hold. Throws INVALID_ARGUMENT naming
// the argument, the document or the group: num_docs < 0, lengths[i] <= 0, a document longer than the capacity, a
// group that would overflow it (the greedy's first overflow, when fill_bins finds no packing either).
// `budget` (NULL: kFillBinsBudget) is fill_bins's, taken from the caller's.
std::vector<std::vector<int32_t>> group_documents(int32_t num_groups, const int64_t* lengths, int32_t num_docs,
                                                  int64_t capacity, int64_t* budget = nullptr);

// Packs documents `docs` (indices into lengths, each > 0) into bins of room[b] tokens each, for batches too tight
// for a greedy. Bins are filled one at a time, the largest room first (ties: the lower index): a bin first takes
// the longest document left that fits it (so the longest documents spread over the bins), then the subset of the
// documents left with the largest total that fits the room left, by an exact subset sum over tokens that prefers
// the longest documents (leaving the short ones to fill the later bins exactly). out[b] receives bin b's
// documents, ascending. Returns false, with `out` unspecified, when documents are left over or when the subset
// sums would cost more than `budget` cells (documents x tokens of room; the cells used are taken from it).
// Deterministic: the same input gives the same packing on every rank.
bool fill_bins(const int64_t* lengths, const std::vector<int32_t>& docs, const std::vector<int64_t>& room,
               std::vector<std::vector<int32_t>>& out, int64_t& budget);

// What world rank `rank` (0..N-1) of `layout` does with the micro-batch: its group's documents and stream, its
// token range of the stream and where that range starts. Same errors as group_documents, and a rank outside
// 0..N-1.
DocumentAssignment assign_documents(const GroupLayout& layout, const int64_t* lengths, int32_t num_docs,
                                    int64_t capacity, int32_t rank);

}  // namespace basp::plan
