// Groups of the world for one micro-batch: pure arithmetic, no I/O.
//
// N ranks, B sequences. G groups (default gcd(N, B)) of K = N / G ranks; group g owns sequences
// [g*B/G, (g+1)*B/G). Membership is data: members[g] lists the world ranks of group g by position. Nothing
// outside this file derives a group or a position from a rank number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basp/basp.h"

namespace basp::plan {

struct GroupLayout {
  int32_t world_size = 0;                     // N
  int64_t micro_batch = 0;                    // B
  int32_t num_groups = 0;                     // G
  int32_t group_size = 0;                     // K
  std::vector<std::vector<int32_t>> members;  // [G][K] world ranks
  std::vector<int32_t> group_of;              // [N] group index of each rank
  std::vector<int32_t> position_of;           // [N] position of each rank in its group

  int64_t sequences_per_group() const { return micro_batch / num_groups; }
};

struct RankInfo {
  int32_t rank = 0;
  int32_t group_index = 0;
  int32_t group_position = 0;
  int64_t first_sequence = 0;
  int64_t num_sequences = 0;
  int64_t token_begin = 0;
  int64_t token_end = 0;
};

// G for N ranks and B sequences: requested (> 0) or gcd(N, B) (requested == -1). Throws on an invalid request.
int32_t resolve_num_groups(int32_t world_size, int64_t micro_batch, int32_t requested);

// The paper's contiguous assignment: group g = ranks g*K .. g*K+K-1.
std::vector<std::vector<int32_t>> contiguous_members(int32_t world_size, int32_t num_groups);

// Validates that `members` partitions 0..N-1 into G lists of K and fills the lookup tables.
GroupLayout make_layout(int32_t world_size, int64_t micro_batch, std::vector<std::vector<int32_t>> members);

// Algorithm 2 of the paper: which sequences and tokens `rank` holds for sequences of seq_len tokens
// (seq_len 0: sequences only, token range 0).
RankInfo describe_rank(const GroupLayout& layout, int32_t rank, int64_t seq_len);

// How messages name a group: "group 1 (world ranks 4..7)".
std::string describe_group(const GroupLayout& layout, int32_t group_index);

}  // namespace basp::plan
