#include "plan/groups.h"

#include <numeric>
#include <utility>

#include "common/error.h"
#include "common/rank_list.h"
#include "common/split.h"

namespace basp::plan {

int32_t resolve_num_groups(int32_t world_size, int64_t micro_batch, int32_t requested) {
  BASP_CHECK_ARG(world_size > 0, "world size (", world_size, ") must be positive");
  BASP_CHECK_ARG(micro_batch > 0, "micro_batch (", micro_batch, ") must be positive");
  if (requested == -1) return static_cast<int32_t>(std::gcd(static_cast<int64_t>(world_size), micro_batch));
  BASP_CHECK_ARG(requested > 0, "num_groups (", requested, ") must be positive or -1 (gcd rule)");
  BASP_CHECK_ARG(world_size % requested == 0, "num_groups (", requested, ") does not divide the world size (",
                 world_size, ")");
  BASP_CHECK_ARG(micro_batch % requested == 0, "num_groups (", requested, ") does not divide micro_batch (",
                 micro_batch, ")");
  return requested;
}

std::vector<std::vector<int32_t>> contiguous_members(int32_t world_size, int32_t num_groups) {
  BASP_CHECK_ARG(num_groups > 0 && world_size % num_groups == 0, "num_groups (", num_groups,
                 ") does not divide the world size (", world_size, ")");
  const int32_t k = world_size / num_groups;
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(num_groups));
  for (int32_t g = 0; g < num_groups; ++g) {
    members[g].resize(static_cast<size_t>(k));
    std::iota(members[g].begin(), members[g].end(), g * k);
  }
  return members;
}

GroupLayout make_layout(int32_t world_size, int64_t micro_batch, std::vector<std::vector<int32_t>> members) {
  BASP_CHECK_ARG(world_size > 0, "world size (", world_size, ") must be positive");
  BASP_CHECK_ARG(micro_batch > 0, "micro_batch (", micro_batch, ") must be positive");
  const auto num_groups = static_cast<int32_t>(members.size());
  BASP_CHECK_ARG(num_groups > 0 && world_size % num_groups == 0, "group count (", num_groups,
                 ") does not divide the world size (", world_size, ")");
  BASP_CHECK_ARG(micro_batch % num_groups == 0, "group count (", num_groups, ") does not divide micro_batch (",
                 micro_batch, ")");
  GroupLayout out;
  out.world_size = world_size;
  out.micro_batch = micro_batch;
  out.num_groups = num_groups;
  out.group_size = world_size / num_groups;
  out.group_of.assign(static_cast<size_t>(world_size), -1);
  out.position_of.assign(static_cast<size_t>(world_size), -1);
  for (int32_t g = 0; g < num_groups; ++g) {
    BASP_CHECK_ARG(static_cast<int32_t>(members[g].size()) == out.group_size, "group ", g, " has ", members[g].size(),
                   " members, expected ", out.group_size);
    for (int32_t p = 0; p < out.group_size; ++p) {
      const int32_t r = members[g][p];
      BASP_CHECK_ARG(r >= 0 && r < world_size, "group ", g, " lists rank ", r, " outside 0..", world_size - 1);
      BASP_CHECK_ARG(out.group_of[r] == -1, "rank ", r, " is listed in groups ", out.group_of[r], " and ", g);
      out.group_of[r] = g;
      out.position_of[r] = p;
    }
  }
  out.members = std::move(members);
  return out;
}

RankInfo describe_rank(const GroupLayout& layout, int32_t rank, int64_t seq_len) {
  BASP_CHECK_ARG(rank >= 0 && rank < layout.world_size, "rank (", rank, ") is outside 0..", layout.world_size - 1);
  BASP_CHECK_ARG(seq_len >= 0, "seq_len (", seq_len, ") must be positive (or 0: no token range)");
  RankInfo info;
  info.rank = rank;
  info.group_index = layout.group_of[rank];
  info.group_position = layout.position_of[rank];
  info.num_sequences = layout.sequences_per_group();
  info.first_sequence = info.group_index * info.num_sequences;
  info.token_begin = detail::split_begin(seq_len, layout.group_size, info.group_position);
  info.token_end = detail::split_begin(seq_len, layout.group_size, info.group_position + 1);
  return info;
}

std::string describe_group(const GroupLayout& layout, int32_t group_index) {
  const auto& members = layout.members.at(static_cast<size_t>(group_index));
  return "group " + std::to_string(group_index) + " (world rank" + (members.size() == 1 ? " " : "s ") +
         detail::compress_ranks(members) + ")";
}

}  // namespace basp::plan
