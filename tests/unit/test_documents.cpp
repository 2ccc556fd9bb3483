// Documents to groups (plan/documents.h): hand-worked assignments, then properties over random batches checked
// against a reference written here (a plain O(D * G) greedy and brute-force walks), then every error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "plan/documents.h"
#include "plan/groups.h"

using basp::plan::DocumentAssignment;
using basp::plan::GroupLayout;

namespace {

using Groups = std::vector<std::vector<int32_t>>;

GroupLayout contiguous(int32_t world_size, int32_t num_groups) {
  return basp::plan::make_layout(world_size, num_groups, basp::plan::contiguous_members(world_size, num_groups));
}

Groups groups_of(int32_t num_groups, const std::vector<int64_t>& lengths, int64_t capacity = 0) {
  return basp::plan::group_documents(num_groups, lengths.data(), static_cast<int32_t>(lengths.size()), capacity);
}

DocumentAssignment assign(const GroupLayout& layout, const std::vector<int64_t>& lengths, int32_t rank,
                          int64_t capacity = 0) {
  return basp::plan::assign_documents(layout, lengths.data(), static_cast<int32_t>(lengths.size()), capacity, rank);
}

// A packing: every document once, no group over its room.
void check_packing(const Groups& groups, const std::vector<int64_t>& lengths, const std::vector<int64_t>& room) {
  REQUIRE(groups.size() == room.size());
  std::vector<int> seen(lengths.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    int64_t t = 0;
    REQUIRE(std::is_sorted(groups[g].begin(), groups[g].end()));
    for (const int32_t d : groups[g]) {
      REQUIRE((d >= 0 && static_cast<size_t>(d) < lengths.size()));
      ++seen[static_cast<size_t>(d)];
      t += lengths[static_cast<size_t>(d)];
    }
    REQUIRE(t <= room[g]);
  }
  for (const int s : seen) REQUIRE(s == 1);
}

// The rule of basp.h, written the plain way: stable order by decreasing length, then a linear scan for the group
// with the fewest tokens, then the smallest sum of squares, then the lowest index.
Groups reference_groups(int32_t num_groups, const std::vector<int64_t>& lengths) {
  std::vector<int32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lengths[a] > lengths[b]; });
  std::vector<int64_t> tokens(static_cast<size_t>(num_groups), 0), squares(static_cast<size_t>(num_groups), 0);
  Groups out(static_cast<size_t>(num_groups));
  for (const int32_t d : order) {
    int32_t best = 0;
    for (int32_t g = 1; g < num_groups; ++g) {
      if (tokens[g] < tokens[best] || (tokens[g] == tokens[best] && squares[g] < squares[best])) best = g;
    }
    tokens[best] += lengths[d];
    squares[best] += lengths[d] * lengths[d];
    out[best].push_back(d);
  }
  for (auto& g : out) std::sort(g.begin(), g.end());
  return out;
}

// tensor_split's rule, spelled out: the first T mod K positions hold one token more.
int64_t reference_count(int64_t items, int64_t parts, int64_t j) { return items / parts + (j < items % parts); }

void require_same(const DocumentAssignment& a, const DocumentAssignment& b) {
  REQUIRE(a.rank == b.rank);
  REQUIRE(a.group_index == b.group_index);
  REQUIRE(a.group_position == b.group_position);
  REQUIRE(a.group_size == b.group_size);
  REQUIRE(a.docs == b.docs);
  REQUIRE(a.cu_seqlens == b.cu_seqlens);
  REQUIRE(a.stream_tokens == b.stream_tokens);
  REQUIRE(a.token_begin == b.token_begin);
  REQUIRE(a.token_end == b.token_end);
  REQUIRE(a.first_doc == b.first_doc);
  REQUIRE(a.first_doc_offset == b.first_doc_offset);
  REQUIRE(a.max_seqlen == b.max_seqlen);
  REQUIRE(a.max_group_tokens == b.max_group_tokens);
  REQUIRE(a.imbalance == b.imbalance);
}

uint64_t test_seed() {
  const char* env = std::getenv("BASP_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261202u;
}

}  // namespace

TEST_CASE("documents: hand-worked assignments", "[plan][documents]") {
  // {5, 3, 3, 2} over G = 2, in the order 0, 1, 2, 3 (by length, ties by index):
  //   d0 (5) -> g0 {5}; d1 (3) -> g1 {3}; d2 (3) -> g1 (3 < 5) = 6; d3 (2) -> g0 (5 < 6) = 7.
  CHECK(groups_of(2, {5, 3, 3, 2}) == Groups{{0, 3}, {1, 2}});
  // The sum of squares breaks a tie of tokens: {2, 1, 1, 1, 1} over G = 2:
  //   d0 -> g0 (2 tokens, squares 4); d1 -> g1 (1, 1); d2 -> g1 (1 < 2): (2, 2);
  //   d3: both hold 2 tokens, g1's squares (2) < g0's (4) -> g1 (3, 3); d4 -> g0 (2 < 3).
  // (The lowest index alone would give {0, 3}, {1, 2, 4}.)
  CHECK(groups_of(2, {2, 1, 1, 1, 1}) == Groups{{0, 4}, {1, 2, 3}});
  // A full tie goes to the lowest group: {3, 3, 3}: d0 -> g0, d1 -> g1, d2 -> g0 (3, 9 each).
  CHECK(groups_of(2, {3, 3, 3}) == Groups{{0, 2}, {1}});
  // Equal lengths are taken lower index first: {1, 3, 3}: d1 -> g0, d2 -> g1, d0 -> g0 (a tie, lowest group).
  // (Higher index first would give {0, 2}, {1}.)
  CHECK(groups_of(2, {1, 3, 3}) == Groups{{0, 1}, {2}});
  // One group takes everything, in index order.
  CHECK(groups_of(1, {4, 9, 1}) == Groups{{0, 1, 2}});
  // More groups than documents: the last ones stay empty.
  CHECK(groups_of(4, {2, 7}) == Groups{{1}, {0}, {}, {}});
  CHECK(groups_of(3, {}) == Groups{{}, {}, {}});
}

TEST_CASE("documents: three groups of two, any membership", "[plan][documents]") {
  // {7, 2, 5, 4, 1, 6, 3}, order d0 (7), d5 (6), d2 (5), d3 (4), d6 (3), d1 (2), d4 (1):
  //   d0 -> g0 (7, 49); d5 -> g1 (6, 36); d2 -> g2 (5, 25); d3 -> g2 (9, 41); d6 -> g1 (9, 45); d1 -> g0 (9, 53);
  //   d4: all hold 9 tokens, squares 53, 45, 41 -> g2 (10).
  // g0 = {0, 1}: cu 0 7 9; g1 = {5, 6}: cu 0 6 9; g2 = {2, 3, 4}: cu 0 5 9 10. Total 28, max 10.
  const std::vector<int64_t> lengths = {7, 2, 5, 4, 1, 6, 3};
  const GroupLayout layout = basp::plan::make_layout(6, 3, {{5, 0}, {1, 4}, {2, 3}});
  CHECK(groups_of(3, lengths) == Groups{{0, 1}, {5, 6}, {2, 3, 4}});

  // World rank 3: group 2, position 1: tokens [5, 10) of its stream, from the start of document 3 (index 1).
  DocumentAssignment a = assign(layout, lengths, 3);
  CHECK(a.rank == 3);
  CHECK(a.group_index == 2);
  CHECK(a.group_position == 1);
  CHECK(a.group_size == 2);
  CHECK(a.docs == std::vector<int32_t>{2, 3, 4});
  CHECK(a.cu_seqlens == std::vector<int64_t>{0, 5, 9, 10});
  CHECK(a.stream_tokens == 10);
  CHECK(a.token_begin == 5);
  CHECK(a.token_end == 10);
  CHECK(a.first_doc == 1);
  CHECK(a.first_doc_offset == 0);
  CHECK(a.max_seqlen == 5);
  CHECK(a.max_group_tokens == 10);
  CHECK(a.imbalance == Approx(30.0 / 28.0));  // 10 / (28 / 3)

  // World rank 0: group 0, position 1: 9 tokens split 5 + 4, so [5, 9): inside document 0 (7 tokens) at 5.
  a = assign(layout, lengths, 0);
  CHECK(a.group_index == 0);
  CHECK(a.group_position == 1);
  CHECK(a.docs == std::vector<int32_t>{0, 1});
  CHECK(a.cu_seqlens == std::vector<int64_t>{0, 7, 9});
  CHECK(a.token_begin == 5);
  CHECK(a.token_end == 9);
  CHECK(a.first_doc == 0);
  CHECK(a.first_doc_offset == 5);
  CHECK(a.max_seqlen == 7);

  // World rank 1: group 1, position 0: [0, 5) of {5, 6}, inside document 5 at 0.
  a = assign(layout, lengths, 1);
  CHECK(a.group_index == 1);
  CHECK(a.group_position == 0);
  CHECK(a.docs == std::vector<int32_t>{5, 6});
  CHECK(a.token_begin == 0);
  CHECK(a.token_end == 5);
  CHECK(a.first_doc == 0);
  CHECK(a.first_doc_offset == 0);
  CHECK(a.max_seqlen == 6);
  CHECK(a.max_group_tokens == 10);
}

TEST_CASE("documents: uneven splits, ranks without tokens, empty groups and batches", "[plan][documents]") {
  // G = 1, K = 3, {4, 6}: 10 tokens split 4 + 3 + 3: [0, 4) [4, 7) [7, 10).
  const GroupLayout one = contiguous(3, 1);
  const std::vector<int64_t> two = {4, 6};
  DocumentAssignment a = assign(one, two, 0);
  CHECK((a.token_begin == 0 && a.token_end == 4 && a.first_doc == 0 && a.first_doc_offset == 0));
  a = assign(one, two, 1);
  CHECK((a.token_begin == 4 && a.token_end == 7 && a.first_doc == 1 && a.first_doc_offset == 0));
  a = assign(one, two, 2);
  CHECK((a.token_begin == 7 && a.token_end == 10 && a.first_doc == 1 && a.first_doc_offset == 3));
  CHECK(a.imbalance == 1.0);

  // K = 4 ranks for a 2-token stream: positions 2 and 3 hold nothing.
  const GroupLayout four = contiguous(4, 1);
  a = assign(four, {2}, 1);
  CHECK((a.token_begin == 1 && a.token_end == 2 && a.first_doc == 0 && a.first_doc_offset == 1));
  a = assign(four, {2}, 3);
  CHECK((a.token_begin == 2 && a.token_end == 2 && a.first_doc == -1 && a.first_doc_offset == 0));

  // G = 2 for one document: group 1 is empty; imbalance 5 / (5 / 2) = 2.
  const GroupLayout pairs = contiguous(2, 2);
  a = assign(pairs, {5}, 1);
  CHECK(a.group_index == 1);
  CHECK(a.docs.empty());
  CHECK(a.cu_seqlens == std::vector<int64_t>{0});
  CHECK((a.stream_tokens == 0 && a.token_begin == 0 && a.token_end == 0));
  CHECK((a.first_doc == -1 && a.first_doc_offset == 0 && a.max_seqlen == 0));
  CHECK(a.max_group_tokens == 5);
  CHECK(a.imbalance == 2.0);

  // No document at all (lengths may then be NULL).
  a = basp::plan::assign_documents(pairs, nullptr, 0, 0, 0);
  CHECK(a.docs.empty());
  CHECK(a.cu_seqlens == std::vector<int64_t>{0});
  CHECK((a.max_group_tokens == 0 && a.imbalance == 1.0 && a.first_doc == -1));
}

TEST_CASE("documents: the capacity", "[plan][documents]") {
  const GroupLayout pairs = contiguous(2, 2);
  // {6, 6, 6} over 2 groups: the third document makes 12 tokens in group 0.
  CHECK(assign(pairs, {6, 6, 6}, 0, 12).stream_tokens == 12);
  REQUIRE_THROWS_WITH(assign(pairs, {6, 6, 6}, 0, 11),
                      Catch::Contains("group 0 would hold 12 tokens, more than the capacity (11)") &&
                          Catch::Contains("document 2 (6 tokens)"));
  REQUIRE_THROWS_WITH(assign(pairs, {100, 9000, 5}, 1, 8192),
                      Catch::Contains("document 1 (9000 tokens) is longer than the capacity (8192)"));
  // A document exactly as long as the capacity fits.
  CHECK(assign(pairs, {8192, 5}, 0, 8192).docs == std::vector<int32_t>{0});
}

TEST_CASE("documents: every error names its argument and value", "[plan][documents]") {
  const GroupLayout layout = contiguous(4, 2);
  const std::vector<int64_t> good = {3, 1, 2};
  try {
    assign(layout, {3, 1, 2, 0}, 0);
    FAIL("no error");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("lengths[3] (0) must be positive"));
  }
  REQUIRE_THROWS_WITH(assign(layout, {3, -7}, 0), Catch::Contains("lengths[1] (-7) must be positive"));
  REQUIRE_THROWS_WITH(basp::plan::assign_documents(layout, good.data(), -1, 0, 0), Catch::Contains("num_docs (-1)"));
  REQUIRE_THROWS_WITH(assign(layout, good, 4), Catch::Contains("rank (4) is outside 0..3"));
  REQUIRE_THROWS_WITH(assign(layout, good, -1), Catch::Contains("rank (-1) is outside 0..3"));
  REQUIRE_THROWS_WITH(assign(layout, good, 0, -5), Catch::Contains("capacity (-5)"));
  try {
    basp::plan::assign_documents(layout, nullptr, 2, 0, 0);
    FAIL("no error");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_NULL_POINTER);
    CHECK_THAT(e.what(), Catch::Contains("lengths is NULL"));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  REQUIRE_THROWS_WITH(assign(layout, {kMax, 1}, 0), Catch::Contains("the total of lengths overflows"));
  REQUIRE_THROWS_WITH(assign(layout, {int64_t{4} << 30, 1}, 0), Catch::Contains("overflows"));
  REQUIRE_THROWS_WITH(basp::plan::group_documents(0, good.data(), 3, 0), Catch::Contains("num_groups (0)"));
}

TEST_CASE("documents: properties over random batches", "[plan][documents]") {
  const uint64_t seed = test_seed();
  std::cout << "test_documents: seed " << seed << " (set BASP_TEST_SEED to replay another)" << std::endl;
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 400; ++trial) {
    const auto g = static_cast<int32_t>(uniform(1, 8));
    const auto k = static_cast<int32_t>(uniform(1, 8));
    const int32_t n = g * k;
    // Membership is data: a random partition of the ranks, not only the contiguous one.
    std::vector<int32_t> ranks(static_cast<size_t>(n));
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), rng);
    Groups members(static_cast<size_t>(g));
    for (int32_t i = 0; i < n; ++i) members[i / k].push_back(ranks[i]);
    const GroupLayout layout = basp::plan::make_layout(n, g, members);
    // Lengths from 1 to several thousand tokens; a narrow range every fourth trial, so that ties are common.
    const int64_t longest_allowed = trial % 4 == 0 ? 4 : 6000;
    std::vector<int64_t> lengths(static_cast<size_t>(uniform(0, 40)));
    for (auto& len : lengths) len = uniform(1, longest_allowed);
    INFO("seed " << seed << " trial " << trial << " G " << g << " K " << k << " D " << lengths.size());

    const Groups expected = reference_groups(g, lengths);
    REQUIRE(groups_of(g, lengths) == expected);
    std::vector<int64_t> group_tokens(static_cast<size_t>(g), 0);
    std::vector<int> assigned(lengths.size(), 0);
    for (int32_t gi = 0; gi < g; ++gi) {
      for (const int32_t d : expected[gi]) {
        group_tokens[gi] += lengths[d];
        assigned[d]++;
      }
    }
    for (const int count : assigned) REQUIRE(count == 1);  // every document exactly once
    const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    const int64_t max_tokens = *std::max_element(group_tokens.begin(), group_tokens.end());
    const int64_t min_tokens = *std::min_element(group_tokens.begin(), group_tokens.end());
    const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
    REQUIRE(max_tokens - min_tokens <= longest);  // the greedy bound

    // Per group: the positions' ranges tile the stream in order.
    std::vector<int64_t> next_begin(static_cast<size_t>(g), 0);
    for (int32_t gi = 0; gi < g; ++gi) {
      for (int32_t l = 0; l < k; ++l) {
        const int32_t r = layout.members[gi][l];
        const DocumentAssignment a = assign(layout, lengths, r);
        require_same(a, assign(layout, lengths, r));  // deterministic
        REQUIRE(a.rank == r);
        REQUIRE(a.group_index == gi);
        REQUIRE(a.group_position == l);
        REQUIRE(a.group_size == k);
        REQUIRE(a.docs == expected[gi]);
        REQUIRE(std::adjacent_find(a.docs.begin(), a.docs.end(), std::greater_equal<>()) == a.docs.end());
        REQUIRE(a.cu_seqlens.size() == a.docs.size() + 1);
        REQUIRE(a.cu_seqlens[0] == 0);
        for (size_t j = 0; j < a.docs.size(); ++j) REQUIRE(a.cu_seqlens[j + 1] - a.cu_seqlens[j] == lengths[a.docs[j]]);
        REQUIRE(a.stream_tokens == group_tokens[gi]);
        const int64_t t = group_tokens[gi];
        REQUIRE(a.token_begin == next_begin[gi]);
        REQUIRE(a.token_end - a.token_begin == reference_count(t, k, l));
        next_begin[gi] = a.token_end;
        // Where token_begin lies, by walking the documents one token-run at a time.
        int32_t doc = -1;
        int64_t offset = 0;
        if (a.token_begin < a.token_end) {
          int64_t start = 0;
          for (size_t j = 0; j < a.docs.size(); ++j) {
            const int64_t len = lengths[a.docs[j]];
            if (a.token_begin < start + len) {
              doc = static_cast<int32_t>(j);
              offset = a.token_begin - start;
              break;
            }
            start += len;
          }
        }
        REQUIRE(a.first_doc == doc);
        REQUIRE(a.first_doc_offset == offset);
        int64_t group_longest = 0;
        for (const int32_t d : expected[gi]) group_longest = std::max(group_longest, lengths[d]);
        REQUIRE(a.max_seqlen == group_longest);
        REQUIRE(a.max_group_tokens == max_tokens);
        REQUIRE(a.imbalance == Approx(total == 0 ? 1.0 : static_cast<double>(max_tokens) * g / total));
        REQUIRE(a.imbalance >= 1.0 - 1e-12);
      }
      REQUIRE(next_begin[gi] == group_tokens[gi]);
    }

    // The capacity: exactly the largest stream fits and changes nothing; one token less overflows the greedy, so
    // the answer is either an exact packing within it or the error. (Capacity 0 means none: the second half needs a
    // largest stream of 2 tokens or more.)
    if (max_tokens > 0) REQUIRE(groups_of(g, lengths, max_tokens) == expected);
    if (max_tokens > 1) {
      Groups tighter;
      try {
        tighter = groups_of(g, lengths, max_tokens - 1);
      } catch (const basp::detail::Error&) {
        continue;
      }
      REQUIRE(tighter != expected);
      check_packing(tighter, lengths, std::vector<int64_t>(static_cast<size_t>(g), max_tokens - 1));
    }
  }
}

// Exact packing (fill_bins, and group_documents when its greedy overflows). Batches with a packing that fills every
// group exactly are made by cutting each group's capacity into random documents, then shuffling: a packing data
// loader's output, which longest-first greedy almost never fits.
TEST_CASE("documents: batches packed to exactly the capacity", "[plan][documents]") {
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed ^ 0x5eed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  int greedy_fits = 0, packed = 0, trials = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto g = static_cast<int32_t>(uniform(2, 8));
    const int64_t capacity = uniform(64, 8192);
    std::vector<int64_t> lengths;
    for (int32_t gi = 0; gi < g; ++gi) {
      int64_t left = capacity;
      while (left > 0) {  // long-tail pieces: mostly short, sometimes most of the group
        const int64_t cut = std::min(
            left, std::max<int64_t>(1, static_cast<int64_t>(std::exp(std::log(static_cast<double>(capacity)) *
                                                                     static_cast<double>(rng() % 1000) / 1000.0))));
        lengths.push_back(cut);
        left -= cut;
      }
    }
    std::shuffle(lengths.begin(), lengths.end(), rng);
    INFO("seed " << seed << " trial " << trial << " G " << g << " capacity " << capacity << " D " << lengths.size());
    ++trials;
    // The greedy's own answer with no capacity shows whether it alone would have fitted.
    const Groups greedy = reference_groups(g, lengths);
    int64_t greedy_max = 0;
    for (const auto& docs : greedy) {
      int64_t t = 0;
      for (const int32_t d : docs) t += lengths[static_cast<size_t>(d)];
      greedy_max = std::max(greedy_max, t);
    }
    if (greedy_max <= capacity) ++greedy_fits;
    Groups out;
    try {
      out = groups_of(g, lengths, capacity);
    } catch (const basp::detail::Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("no exact packing of the documents into " + std::to_string(g)));
      continue;
    }
    ++packed;
    check_packing(out, lengths, std::vector<int64_t>(static_cast<size_t>(g), capacity));
    REQUIRE(groups_of(g, lengths, capacity) == out);  // deterministic
  }
  WARN("exactly full batches: the greedy fits " << greedy_fits << ", group_documents packs " << packed << " of "
                                                << trials);
  // A packing exists in every trial; the heuristic must find nearly all of them, and far more than the greedy.
  REQUIRE(packed >= trials * 9 / 10);
  REQUIRE(packed > greedy_fits);
}

TEST_CASE("documents: fill_bins against brute force, and its budget", "[plan][documents]") {
  std::mt19937_64 rng(test_seed() ^ 0xb1u);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  int feasible = 0, found = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const auto bins = static_cast<size_t>(uniform(1, 3));
    std::vector<int64_t> room(bins);
    for (auto& r : room) r = uniform(0, 12);
    std::vector<int64_t> lengths(static_cast<size_t>(uniform(0, 7)));
    for (auto& l : lengths) l = uniform(1, 9);
    std::vector<int32_t> docs(lengths.size());
    std::iota(docs.begin(), docs.end(), 0);
    INFO("trial " << trial);
    // Brute force: every assignment of documents to bins.
    bool exists = false;
    size_t combos = 1;
    for (size_t d = 0; d < lengths.size(); ++d) combos *= bins;
    for (size_t code = 0; code < combos && !exists; ++code) {
      std::vector<int64_t> load(bins, 0);
      size_t c = code;
      for (const int64_t l : lengths) {
        load[c % bins] += l;
        c /= bins;
      }
      exists = true;
      for (size_t b = 0; b < bins; ++b) exists = exists && load[b] <= room[b];
    }
    Groups out;
    int64_t budget = basp::plan::kFillBinsBudget;
    const bool ok = basp::plan::fill_bins(lengths.data(), docs, room, out, budget);
    if (ok) check_packing(out, lengths, room);
    REQUIRE((!ok || exists));  // never a packing where none exists
    feasible += exists;
    found += ok;
  }
  WARN("fill_bins on tiny cases: " << found << " of " << feasible << " feasible ones packed");
  REQUIRE(found >= feasible * 9 / 10);

  // The budget: a subset sum of 1,000 tokens over 3 documents costs 3,000 cells.
  const std::vector<int64_t> lengths{600, 500, 450, 400};
  const std::vector<int32_t> docs{0, 1, 2, 3};
  Groups out;
  int64_t budget = 2999;
  // Bin 0 (1,450): 600 anchors it, then 850 of room over {500, 450, 400}: 2,550 cells.
  REQUIRE(basp::plan::fill_bins(lengths.data(), docs, {1450, 500}, out, budget));
  CHECK(budget == 2999 - 850 * 3);
  CHECK(out == Groups{{0, 2, 3}, {1}});
  budget = 2549;
  CHECK_FALSE(basp::plan::fill_bins(lengths.data(), docs, {1450, 500}, out, budget));
  CHECK(budget == 2549);  // nothing taken by a refusal
}
