// The batch planner's entry points (batch_planner.h) and its fixed-size plans: the uniform plans of one K and the
// nearly equal plans of small worlds, evaluated with the mixed plan (mixed_plan.cpp) after placement by the exact
// objective (batch_model.cpp).
#include "plan/batch_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "common/checked.h"
#include "common/error.h"
#include "plan/batch_model.h"
#include "plan/documents.h"
#include "plan/mixed_plan.h"

namespace basp::plan {

namespace {

using batch_internal::ceil_div;
using batch_internal::estimate;
using batch_internal::group_times;
using batch_internal::Lists;
using batch_internal::max_of;
using batch_internal::saturating_mul;
using batch_internal::Work;

// The byte model's bytes per token of the whole batch (batch_model.cpp's at K = 1, the largest), each in int64:
// the scatter's Q, K and V, and the gather's output.
void check_token_bytes(const BatchProblem& p) {
  const int64_t dv = batch_internal::value_dim(p);
  int64_t q = 0, k = 0, v = 0, scatter = 0, gather = 0;
  const bool overflow =
      __builtin_mul_overflow(p.query_heads, p.head_dim, &q) || __builtin_mul_overflow(p.kv_heads, p.head_dim, &k) ||
      __builtin_mul_overflow(p.kv_heads, dv, &v) || __builtin_add_overflow(q, k, &scatter) ||
      __builtin_add_overflow(scatter, v, &scatter) || __builtin_mul_overflow(scatter, p.elem_size, &scatter) ||
      __builtin_mul_overflow(p.query_heads, dv, &gather) || __builtin_mul_overflow(gather, p.elem_size, &gather);
  BASP_CHECK_ARG(!overflow, "the bytes per token ((query_heads * head_dim + kv_heads * (head_dim + v_head_dim)) * ",
                 "elem_size, and query_heads * v_head_dim * elem_size) overflow int64 with query_heads ", p.query_heads,
                 ", kv_heads ", p.kv_heads, ", head_dim ", p.head_dim, ", v_head_dim ", p.v_head_dim,
                 " (0: head_dim) and elem_size ", p.elem_size);
}

void check_problem(const BatchProblem& p) {
  const auto n = static_cast<int64_t>(p.machine.ranks.size());
  BASP_CHECK_ARG(n > 0, "machine.ranks is empty: the batch needs at least one rank");
  BASP_CHECK_ARG(n <= std::numeric_limits<int32_t>::max(), "machine.ranks (", n, " ranks) is too large");
  BASP_CHECK_ARG(p.query_heads > 0, "query_heads (", p.query_heads, ") must be positive");
  BASP_CHECK_ARG(p.kv_heads > 0, "kv_heads (", p.kv_heads, ") must be positive");
  BASP_CHECK_ARG(p.query_heads % p.kv_heads == 0, "kv_heads (", p.kv_heads, ") must divide query_heads (",
                 p.query_heads, ")");
  BASP_CHECK_ARG(p.head_dim > 0, "head_dim (", p.head_dim, ") must be positive");
  BASP_CHECK_ARG(p.v_head_dim >= 0, "v_head_dim (", p.v_head_dim, ") must be 0 (head_dim) or positive");
  BASP_CHECK_ARG(p.elem_size > 0, "elem_size (", p.elem_size, ") must be positive");
  check_token_bytes(p);
  BASP_CHECK_ARG(p.capacity > 0, "capacity (", p.capacity, ") must be positive");
  BASP_CHECK_ARG(p.lengths.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "lengths (",
                 p.lengths.size(), " documents) is too long");
  const int64_t most = saturating_mul(p.capacity, n);
  int64_t total = 0;
  for (size_t i = 0; i < p.lengths.size(); ++i) {
    const int64_t l = p.lengths[i];
    BASP_CHECK_ARG(l > 0, "lengths[", i, "] (", l, ") must be positive");
    BASP_CHECK_ARG(l <= most, "lengths[", i, "] (", l, " tokens) is longer than ", n, " ranks of capacity (",
                   p.capacity, ") can hold (", most, " tokens)");
    total = detail::checked_add(total, l, "the total of lengths");
  }
  BASP_CHECK_ARG(total <= most, "the batch of lengths (", total, " tokens in ", p.lengths.size(),
                 " documents) is more than ", n, " ranks of capacity (", p.capacity, ") can hold (", most, " tokens)");
}

struct Candidate {
  Lists members;
  Lists docs;
  std::vector<double> times;
  double max = std::numeric_limits<double>::infinity();
};

// Places logical groups (sizes, document lists) and evaluates them exactly. Groups of one size are matched to
// the placed groups of that size in order: the logical ones by their lowest document (empty ones last), the placed
// ones by their lowest rank.
Candidate place_and_evaluate(const BatchProblem& p, const UnitMap& m, const std::vector<int32_t>& sizes, Lists docs) {
  Candidate c;
  Lists placed = place_mixed_groups(p.machine, sizes);
  std::vector<int32_t> logical(sizes.size());
  std::iota(logical.begin(), logical.end(), 0);
  auto first_doc = [&](int32_t g) {
    const auto& d = docs[static_cast<size_t>(g)];
    return d.empty() ? std::numeric_limits<int32_t>::max() : d.front();
  };
  std::stable_sort(logical.begin(), logical.end(), [&](int32_t a, int32_t b) {
    const int32_t sa = sizes[static_cast<size_t>(a)], sb = sizes[static_cast<size_t>(b)];
    return sa != sb ? sa < sb : first_doc(a) < first_doc(b);
  });
  std::vector<int32_t> slots(placed.size());
  std::iota(slots.begin(), slots.end(), 0);
  std::stable_sort(slots.begin(), slots.end(),
                   [&](int32_t a, int32_t b) { return placed[static_cast<size_t>(a)].size() < placed[b].size(); });
  c.docs.resize(placed.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    c.docs[static_cast<size_t>(slots[i])] = std::move(docs[static_cast<size_t>(logical[i])]);
  }
  c.members = std::move(placed);
  c.times = group_times(p, m, c.members, c.docs);
  c.max = max_of(c.times);
  return c;
}

// The best plan of N/K groups of K for each K dividing N, documents by plan::group_documents, placed by
// place_groups (the same as place_mixed_groups with equal sizes).
void uniform_plans(const BatchProblem& p, const UnitMap& m, int64_t longest, Candidate& best) {
  for (int32_t k = 1; k <= m.n; ++k) {
    if (m.n % k != 0) continue;
    const int64_t group_capacity = saturating_mul(p.capacity, k);
    if (longest > group_capacity) continue;
    const int32_t g = m.n / k;
    Lists docs;
    try {
      docs = group_documents(g, p.lengths.data(), static_cast<int32_t>(p.lengths.size()), group_capacity);
    } catch (const detail::Error&) {
      continue;  // neither the greedy nor an exact packing holds the batch: no plan of this K
    }
    Candidate c;
    c.members = place_groups(p.machine, g);
    c.docs = std::move(docs);
    c.times = group_times(p, m, c.members, c.docs);
    c.max = max_of(c.times);
    if (c.max < best.max) best = std::move(c);
  }
}

// Small worlds only (N <= kNearlyEqualMaxRanks): G groups of nearly equal sizes (split_count(N, G, g) ranks) for
// every G not dividing N (N = 3: 2 + 1), documents longest first each to the group whose estimate grows least
// (ties: the lower group) among those that still hold it. False when one does not fit.
constexpr int32_t kNearlyEqualMaxRanks = 32;

// The exact packings (fill_bins) of the mixed and nearly equal plans of one plan_batch call share this many
// subset-sum cells (bits: milliseconds, 16 MB at most); each uniform K has group_documents's own.
constexpr int64_t kPlannerFillBudget = kFillBinsBudget;

bool nearly_equal_plan(const BatchProblem& p, const UnitMap& m, int32_t g, int64_t& budget, std::vector<int32_t>& sizes,
                       Lists& docs) {
  const std::vector<int32_t> order = batch_internal::longest_first(p);
  sizes.assign(static_cast<size_t>(g), 0);
  for (int32_t j = 0; j < g; ++j) sizes[static_cast<size_t>(j)] = static_cast<int32_t>(m.n / g + (j < m.n % g));
  docs.assign(static_cast<size_t>(g), {});
  std::vector<Work> work(static_cast<size_t>(g));
  for (const int32_t d : order) {
    const int64_t l = p.lengths[static_cast<size_t>(d)];
    const auto dl = static_cast<double>(l);
    int32_t best = -1;
    double best_t = 0;
    for (int32_t j = 0; j < g; ++j) {
      const Work& w = work[static_cast<size_t>(j)];
      const int32_t k = sizes[static_cast<size_t>(j)];
      if (ceil_div(w.tokens + l, k) > p.capacity) continue;
      const double t = estimate(p, m, k, w.tokens + l, w.sum_sq + dl * dl, w.sum + dl);
      if (best < 0 || t < best_t) {
        best = j;
        best_t = t;
      }
    }
    if (best < 0) {  // the greedy overflows: the exact packing decides
      std::vector<int64_t> room(static_cast<size_t>(g));
      for (int32_t j = 0; j < g; ++j)
        room[static_cast<size_t>(j)] = saturating_mul(sizes[static_cast<size_t>(j)], p.capacity);
      return fill_bins(p.lengths.data(), order, room, docs, budget);
    }
    Work& w = work[static_cast<size_t>(best)];
    w.tokens += l;
    w.sum += dl;
    w.sum_sq += dl * dl;
    docs[static_cast<size_t>(best)].push_back(d);
  }
  for (auto& list : docs) std::sort(list.begin(), list.end());
  return true;
}

BatchPartition to_partition(const BatchProblem& p, const UnitMap& m, Candidate c) {
  BatchPartition out;
  out.group_of.assign(static_cast<size_t>(m.n), -1);
  out.position_of.assign(static_cast<size_t>(m.n), -1);
  out.doc_group.assign(p.lengths.size(), -1);
  out.groups.resize(c.members.size());
  for (size_t g = 0; g < c.members.size(); ++g) {
    BatchGroup& group = out.groups[g];
    group.members = std::move(c.members[g]);
    group.docs = std::move(c.docs[g]);
    group.predicted_seconds = c.times[g];
    for (size_t l = 0; l < group.members.size(); ++l) {
      out.group_of[static_cast<size_t>(group.members[l])] = static_cast<int32_t>(g);
      out.position_of[static_cast<size_t>(group.members[l])] = static_cast<int32_t>(l);
    }
    for (const int32_t d : group.docs) {
      out.doc_group[static_cast<size_t>(d)] = static_cast<int32_t>(g);
      group.tokens += p.lengths[static_cast<size_t>(d)];
    }
    BASP_CHECK(ceil_div(group.tokens, static_cast<int64_t>(group.members.size())) <= p.capacity, BASP_ERROR_INTERNAL,
               "the batch planner overfilled group ", g, " (", group.tokens, " tokens on ", group.members.size(),
               " ranks of capacity ", p.capacity, ")");
  }
  out.predicted_seconds = c.max;
  return out;
}

}  // namespace

BatchPartition plan_batch(const BatchProblem& problem) {
  check_problem(problem);
  const UnitMap m = make_unit_map(problem.machine);
  int64_t longest = 0;
  for (const int64_t l : problem.lengths) longest = std::max(longest, l);

  Candidate best;
  int64_t budget = kPlannerFillBudget;
  uniform_plans(problem, m, longest, best);
  std::vector<int32_t> sizes;
  Lists docs;
  for (const bool use_slack : {false, true}) {
    if (!batch_internal::mixed_plan(problem, m, use_slack, budget, sizes, docs)) continue;
    Candidate c = place_and_evaluate(problem, m, sizes, std::move(docs));
    if (c.max < best.max) best = std::move(c);
  }
  if (m.n <= kNearlyEqualMaxRanks) {
    for (int32_t g = 2; g < m.n; ++g) {
      if (m.n % g == 0 || !nearly_equal_plan(problem, m, g, budget, sizes, docs)) continue;
      Candidate c = place_and_evaluate(problem, m, sizes, std::move(docs));
      if (c.max < best.max) best = std::move(c);
    }
  }
  // K = N always holds the batch (checked above), so some uniform plan exists.
  BASP_CHECK(std::isfinite(best.max), BASP_ERROR_INTERNAL, "the batch planner found no plan");
  return to_partition(problem, m, std::move(best));
}

double predict_batch(const BatchProblem& problem, const std::vector<std::vector<int32_t>>& members,
                     const std::vector<std::vector<int32_t>>& docs) {
  check_problem(problem);
  const auto n = problem.machine.ranks.size();
  BASP_CHECK_ARG(members.size() == docs.size(), "members (", members.size(), " groups) and docs (", docs.size(),
                 " groups) differ in size");
  std::vector<char> seen(n, 0);
  for (size_t g = 0; g < members.size(); ++g) {
    BASP_CHECK_ARG(!members[g].empty(), "members[", g, "] is empty");
    for (const int32_t r : members[g]) {
      BASP_CHECK_ARG(r >= 0 && static_cast<size_t>(r) < n, "members[", g, "] holds rank ", r, ", outside 0..", n - 1);
      BASP_CHECK_ARG(!seen[static_cast<size_t>(r)], "rank ", r, " is in more than one group (members[", g, "])");
      seen[static_cast<size_t>(r)] = 1;
    }
  }
  for (size_t r = 0; r < n; ++r) BASP_CHECK_ARG(seen[r], "rank ", r, " is in no group of members");
  std::vector<char> assigned(problem.lengths.size(), 0);
  for (size_t g = 0; g < docs.size(); ++g) {
    for (const int32_t d : docs[g]) {
      BASP_CHECK_ARG(d >= 0 && static_cast<size_t>(d) < problem.lengths.size(), "docs[", g, "] holds document ", d,
                     ", outside 0..", static_cast<int64_t>(problem.lengths.size()) - 1);
      BASP_CHECK_ARG(!assigned[static_cast<size_t>(d)], "document ", d, " is in more than one group (docs[", g, "])");
      assigned[static_cast<size_t>(d)] = 1;
    }
  }
  for (size_t d = 0; d < assigned.size(); ++d) BASP_CHECK_ARG(assigned[d], "document ", d, " is in no group of docs");
  return max_of(group_times(problem, make_unit_map(problem.machine), members, docs));
}

}  // namespace basp::plan
