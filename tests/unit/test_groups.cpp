#include <catch2/catch.hpp>

#include <numeric>
#include <set>

#include "common/error.h"
#include "plan/groups.h"

using basp::plan::GroupLayout;

TEST_CASE("planner properties for every N <= 64 and B <= 128", "[plan]") {
  for (int32_t n = 1; n <= 64; ++n) {
    for (int64_t b = 1; b <= 128; ++b) {
      const int32_t g = basp::plan::resolve_num_groups(n, b, -1);
      const GroupLayout layout = basp::plan::make_layout(n, b, basp::plan::contiguous_members(n, g));
      // The gcd rule, and its two named regimes.
      REQUIRE(g == static_cast<int32_t>(std::gcd(static_cast<int64_t>(n), b)));
      REQUIRE(layout.group_size * layout.num_groups == n);
      if (n % b == 0) REQUIRE(layout.num_groups == b);  // the paper: one group per sequence
      if (b % n == 0) REQUIRE(layout.group_size == 1);  // data parallelism
      const int64_t seq_len = 4 * static_cast<int64_t>(layout.group_size);
      std::vector<int> rank_seen(static_cast<size_t>(n), 0);
      std::vector<int> seq_owner(static_cast<size_t>(b), -1);
      for (int32_t r = 0; r < n; ++r) {
        const auto info = basp::plan::describe_rank(layout, r, seq_len);
        rank_seen[r]++;
        // Every rank holds B*S/N tokens.
        REQUIRE(info.num_sequences * (info.token_end - info.token_begin) * n == b * seq_len);
        REQUIRE(layout.members[info.group_index][info.group_position] == r);
        for (int64_t s = info.first_sequence; s < info.first_sequence + info.num_sequences; ++s) {
          REQUIRE((seq_owner[s] == -1 || seq_owner[s] == info.group_index));
          seq_owner[s] = info.group_index;
        }
      }
      // Each rank in exactly one group, each sequence owned by exactly one group.
      for (int32_t r = 0; r < n; ++r) REQUIRE(rank_seen[r] == 1);
      for (int64_t s = 0; s < b; ++s) REQUIRE(seq_owner[s] >= 0);
      for (const auto& members : layout.members) {
        std::set<int32_t> unique(members.begin(), members.end());
        REQUIRE(unique.size() == members.size());
      }
    }
  }
}

TEST_CASE("edge cases: K = 1, G = 1 and beyond-the-paper batches", "[plan]") {
  // N = 8, B = 6: 2 groups of 4, 3 sequences each.
  auto layout =
      basp::plan::make_layout(8, 6, basp::plan::contiguous_members(8, basp::plan::resolve_num_groups(8, 6, -1)));
  CHECK(layout.num_groups == 2);
  CHECK(layout.group_size == 4);
  CHECK(layout.sequences_per_group() == 3);
  auto info = basp::plan::describe_rank(layout, 5, 64);
  CHECK(info.group_index == 1);
  CHECK(info.group_position == 1);
  CHECK(info.first_sequence == 3);
  CHECK(info.token_begin == 16);
  CHECK(info.token_end == 32);
  // Ulysses: one group of all ranks.
  layout = basp::plan::make_layout(8, 4, basp::plan::contiguous_members(8, basp::plan::resolve_num_groups(8, 4, 1)));
  CHECK(layout.group_size == 8);
  CHECK(layout.sequences_per_group() == 4);
  // K = 1.
  layout = basp::plan::make_layout(4, 8, basp::plan::contiguous_members(4, basp::plan::resolve_num_groups(4, 8, -1)));
  CHECK(layout.group_size == 1);
  CHECK(basp::plan::describe_rank(layout, 3, 10).token_end == 10);
}

TEST_CASE("membership is data: any partition is accepted, broken ones are named", "[plan]") {
  auto layout = basp::plan::make_layout(4, 2, {{3, 0}, {1, 2}});
  CHECK(layout.group_of[3] == 0);
  CHECK(layout.position_of[0] == 1);
  CHECK(basp::plan::describe_rank(layout, 0, 8).token_begin == 4);
  REQUIRE_THROWS_WITH(basp::plan::make_layout(4, 2, {{0, 1}, {1, 2}}),
                      Catch::Contains("rank 1 is listed in groups 0 and 1"));
  REQUIRE_THROWS_WITH(basp::plan::make_layout(4, 2, {{0, 1}, {2, 7}}), Catch::Contains("rank 7 outside"));
  REQUIRE_THROWS_WITH(basp::plan::resolve_num_groups(8, 6, 4),
                      Catch::Contains("num_groups (4) does not divide micro_batch (6)"));
  REQUIRE_THROWS_WITH(basp::plan::resolve_num_groups(8, 6, 0), Catch::Contains("num_groups (0)"));
  auto l = basp::plan::make_layout(8, 2, basp::plan::contiguous_members(8, 2));
  // Any length: the tokens follow tensor_split (6 over 4 positions: 2, 2, 1, 1).
  const int64_t begins[] = {0, 2, 4, 5, 6};
  for (int32_t r = 0; r < 4; ++r) {
    CHECK(basp::plan::describe_rank(l, r, 6).token_begin == begins[r]);
    CHECK(basp::plan::describe_rank(l, r, 6).token_end == begins[r + 1]);
  }
  CHECK(basp::plan::describe_rank(l, 3, 3).token_begin == 3);  // S < K: the last position holds no token
  CHECK(basp::plan::describe_rank(l, 3, 3).token_end == 3);
  REQUIRE_THROWS_WITH(basp::plan::describe_rank(l, 0, -1), Catch::Contains("seq_len (-1)"));
  REQUIRE_THROWS_WITH(basp::plan::describe_rank(l, 8, 8), Catch::Contains("rank (8)"));
}
