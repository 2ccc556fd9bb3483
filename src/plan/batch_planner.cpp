#include "plan/batch_planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/checked.h"
#include "common/error.h"
#include "plan/documents.h"

namespace basp::plan {

namespace {

using Lists = std::vector<std::vector<int32_t>>;

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }  // a >= 0, b > 0

// a * b for a, b > 0, saturating at INT64_MAX.
int64_t saturating_mul(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() / b ? std::numeric_limits<int64_t>::max() : a * b;
}

// The machine as dense ids: a rank's locality unit (its NVLink domain when it has one, else its node) and its
// physical node (whose network link carries the cross-unit traffic). Ids in order of the lowest rank.
struct Machine {
  int32_t n = 0;
  std::vector<int32_t> unit_of;
  std::vector<int32_t> node_of;
  int32_t num_units = 0;
  int32_t num_nodes = 0;
  int32_t unit_ranks = 1;  // the most common unit size (ties: the larger), for the placement-free estimate
  int32_t node_ranks = 1;  // the same for physical nodes
};

int32_t most_common(const std::vector<int32_t>& ids, int32_t count) {
  std::vector<int32_t> size(static_cast<size_t>(count), 0);
  for (const int32_t id : ids) ++size[static_cast<size_t>(id)];
  std::vector<int32_t> sorted = size;
  std::sort(sorted.begin(), sorted.end());
  int32_t best = 1, best_count = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    if (static_cast<int32_t>(j - i) >= best_count) {
      best_count = static_cast<int32_t>(j - i);
      best = sorted[i];
    }
    i = j;
  }
  return best;
}

Machine make_machine(const PlacementInput& in) {
  Machine m;
  m.n = static_cast<int32_t>(in.ranks.size());
  std::unordered_map<uint64_t, int32_t> domains, nodes_alone, nodes;
  for (const RankPlace& p : in.ranks) {
    auto& table = p.domain != 0 ? domains : nodes_alone;
    auto u = table.emplace(p.domain != 0 ? p.domain : p.node, m.num_units);
    if (u.second) ++m.num_units;
    m.unit_of.push_back(u.first->second);
    auto v = nodes.emplace(p.node, m.num_nodes);
    if (v.second) ++m.num_nodes;
    m.node_of.push_back(v.first->second);
  }
  m.unit_ranks = most_common(m.unit_of, m.num_units);
  m.node_ranks = most_common(m.node_of, m.num_nodes);
  return m;
}

// The byte model of batch_planner.h: bytes one rank exchanges with one peer.
int64_t busiest_query_heads(const BatchProblem& p, int32_t k) { return ceil_div(p.query_heads, k); }
int64_t busiest_kv_heads(const BatchProblem& p, int32_t k) { return std::max<int64_t>(1, ceil_div(p.kv_heads, k)); }
double scatter_per_peer(const BatchProblem& p, int32_t k, int64_t tokens) {
  return static_cast<double>(ceil_div(tokens, k)) *
         static_cast<double>(busiest_query_heads(p, k) + 2 * busiest_kv_heads(p, k)) *
         static_cast<double>(p.head_dim * p.elem_size);
}
double gather_per_peer(const BatchProblem& p, int32_t k, int64_t tokens) {
  return static_cast<double>(ceil_div(tokens, k)) * static_cast<double>(busiest_query_heads(p, k)) *
         static_cast<double>(p.head_dim * p.elem_size);
}
double share(const BatchProblem& p, int32_t k) {
  return static_cast<double>(busiest_query_heads(p, k)) / static_cast<double>(p.query_heads);
}

struct Work {
  int64_t tokens = 0;
  double sum_sq = 0;
  double sum = 0;
};

Work work_of(const BatchProblem& p, const std::vector<int32_t>& docs) {
  Work w;
  for (const int32_t d : docs) {
    const int64_t l = p.lengths[static_cast<size_t>(d)];
    w.tokens += l;
    w.sum += static_cast<double>(l);
    w.sum_sq += static_cast<double>(l) * static_cast<double>(l);
  }
  return w;
}

// The exact objective: each group's scatter + attention + gather with the given membership (see the header).
std::vector<double> group_times(const BatchProblem& p, const Machine& m, const Lists& members, const Lists& docs) {
  const size_t groups = members.size();
  std::vector<Work> work(groups);
  std::vector<double> pps(groups), ppg(groups);
  std::vector<int32_t> most_local(groups, 0);
  std::vector<int32_t> remote(static_cast<size_t>(m.n), 0);  // by rank: peers outside its unit
  std::vector<int32_t> count(static_cast<size_t>(m.num_units), 0);
  std::vector<double> load_s(static_cast<size_t>(m.num_nodes), 0.0), load_g(static_cast<size_t>(m.num_nodes), 0.0);
  for (size_t g = 0; g < groups; ++g) {
    const auto k = static_cast<int32_t>(members[g].size());
    work[g] = work_of(p, docs[g]);
    if (k <= 1) continue;
    pps[g] = scatter_per_peer(p, k, work[g].tokens);
    ppg[g] = gather_per_peer(p, k, work[g].tokens);
    for (const int32_t r : members[g]) ++count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])];
    for (const int32_t r : members[g]) {
      const int32_t c = count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])];
      most_local[g] = std::max(most_local[g], c);
      const int32_t out = k - c;
      remote[static_cast<size_t>(r)] = out;
      const auto node = static_cast<size_t>(m.node_of[static_cast<size_t>(r)]);
      load_s[node] += pps[g] * out;
      load_g[node] += ppg[g] * out;
    }
    for (const int32_t r : members[g]) count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])] = 0;
  }
  std::vector<double> times(groups);
  for (size_t g = 0; g < groups; ++g) {
    const auto k = static_cast<int32_t>(members[g].size());
    double t = p.model.attention_seconds(work[g].sum_sq, work[g].sum, share(p, k));
    if (k > 1) {
      double net_s = 0, net_g = 0;
      for (const int32_t r : members[g]) {
        if (remote[static_cast<size_t>(r)] == 0) continue;
        const auto node = static_cast<size_t>(m.node_of[static_cast<size_t>(r)]);
        net_s = std::max(net_s, load_s[node]);
        net_g = std::max(net_g, load_g[node]);
      }
      const double local = static_cast<double>(most_local[g] - 1);
      t += p.model.exchange_seconds(k, pps[g] * local, net_s) + p.model.exchange_seconds(k, ppg[g] * local, net_g);
    }
    times[g] = t;
  }
  return times;
}

// The placement-free estimate the planner sizes groups with: a group of k spans units of m.unit_ranks ranks whole
// (its ranks' other peers are remote) and alone on its nodes' links.
double estimate(const BatchProblem& p, const Machine& m, int32_t k, int64_t tokens, double sum_sq, double sum) {
  double t = p.model.attention_seconds(sum_sq, sum, share(p, k));
  if (k <= 1) return t;
  const int32_t inside = std::min(k, m.unit_ranks);
  const double local = inside - 1;
  const double out = static_cast<double>(k - inside) * std::min(k, m.node_ranks);
  const double s = scatter_per_peer(p, k, tokens), g = gather_per_peer(p, k, tokens);
  return t + p.model.exchange_seconds(k, s * local, s * out) + p.model.exchange_seconds(k, g * local, g * out);
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
  BASP_CHECK_ARG(p.elem_size > 0, "elem_size (", p.elem_size, ") must be positive");
  detail::checked_mul(p.head_dim, p.elem_size, "head_dim * elem_size");
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

double max_of(const std::vector<double>& v) {
  double out = 0;
  for (const double x : v) out = std::max(out, x);
  return out;
}

// Places logical groups (sizes, document lists) and evaluates them exactly. Groups of one size are matched to
// the placed groups of that size in order: the logical ones by their lowest document (empty ones last), the placed
// ones by their lowest rank.
Candidate place_and_evaluate(const BatchProblem& p, const Machine& m, const std::vector<int32_t>& sizes, Lists docs) {
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
void uniform_plans(const BatchProblem& p, const Machine& m, int64_t longest, Candidate& best) {
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

// The mixed plan: every document alone in a group of its own size, or packed with others on single ranks.
//
// For a target time tau a document takes the smallest K, among K_min = ceil(L / capacity) and the smallest K of
// each query-head share ceil(Hq / K) above it, whose estimate is within tau; the documents that take K = 1 are
// packed onto single ranks, at least max(their tokens / capacity, their attention / tau) of them. The smallest tau
// whose ranks fit in N (bisection: the count only falls as tau grows) sets the sizes; the short documents are then
// shared out over every rank left (longest first, each to the least loaded rank that holds it), and the ranks
// still left grow the slowest groups while that lowers their estimate. Returns false when the sizes at any tau
// exceed N (long documents that must share a group) or the packing overflows a rank.
bool mixed_plan(const BatchProblem& p, const Machine& m, bool use_slack, int64_t& budget,
                std::vector<int32_t>& sizes_out, Lists& docs_out) {
  const auto num_docs = static_cast<int32_t>(p.lengths.size());
  const int64_t cap = p.capacity;
  std::vector<int32_t> order(static_cast<size_t>(num_docs));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return p.lengths[a] != p.lengths[b] ? p.lengths[a] > p.lengths[b] : a < b; });
  // The K that change the busiest rank's query heads: K = 1 and every K where ceil(Hq / K) drops.
  std::vector<int32_t> steps;
  for (int64_t k = 1; k <= std::min<int64_t>(p.query_heads, m.n); ++k) {
    if (k == 1 || ceil_div(p.query_heads, k) < ceil_div(p.query_heads, k - 1)) steps.push_back(static_cast<int32_t>(k));
  }
  // Candidate sizes and their estimates, per document (by position in `order`), flattened.
  std::vector<size_t> begin(static_cast<size_t>(num_docs) + 1, 0);
  std::vector<int32_t> cand_k;
  std::vector<double> cand_t;
  for (int32_t i = 0; i < num_docs; ++i) {
    const int64_t l = p.lengths[static_cast<size_t>(order[static_cast<size_t>(i)])];
    const auto kmin = static_cast<int32_t>(ceil_div(l, cap));
    const double sum = static_cast<double>(l), sum_sq = sum * sum;
    cand_k.push_back(kmin);
    cand_t.push_back(estimate(p, m, kmin, l, sum_sq, sum));
    for (const int32_t k : steps) {
      if (k <= kmin) continue;
      cand_k.push_back(k);
      cand_t.push_back(estimate(p, m, k, l, sum_sq, sum));
    }
    begin[static_cast<size_t>(i) + 1] = cand_k.size();
  }
  auto choose = [&](int32_t i, double tau) -> int64_t {  // index into cand_*, or -1
    for (size_t j = begin[static_cast<size_t>(i)]; j < begin[static_cast<size_t>(i) + 1]; ++j) {
      if (cand_t[j] <= tau) return static_cast<int64_t>(j);
    }
    return -1;
  };
  const double full = p.model.attention_seconds(1.0, 0.0, 1.0), lin = p.model.attention_seconds(0.0, 1.0, 1.0);
  auto needed = [&](double tau) -> int64_t {
    int64_t ranks = 0, small_tokens = 0, small = 0, slack = 0;
    double small_work = 0;
    for (int32_t i = 0; i < num_docs; ++i) {
      const int64_t j = choose(i, tau);
      if (j < 0) return std::numeric_limits<int64_t>::max();
      const int32_t k = cand_k[static_cast<size_t>(j)];
      if (use_slack && k > 1) {
        slack += saturating_mul(k, cap) - p.lengths[static_cast<size_t>(order[static_cast<size_t>(i)])];
      }
      if (k == 1) {
        const auto l = static_cast<double>(p.lengths[static_cast<size_t>(order[static_cast<size_t>(i)])]);
        small_tokens += p.lengths[static_cast<size_t>(order[static_cast<size_t>(i)])];
        small_work += full * l * l + lin * l;
        ++small;
      } else {
        ranks += k;
      }
    }
    if (small > 0) {
      int64_t bins = ceil_div(std::max<int64_t>(0, small_tokens - slack), cap);
      if (small_work > 0 && tau > 0) {
        const double by_work = std::ceil(small_work / tau);
        bins = std::max<int64_t>(bins,
                                 by_work >= 1e18 ? std::numeric_limits<int32_t>::max() : static_cast<int64_t>(by_work));
      } else if (small_work > 0) {
        bins = std::numeric_limits<int32_t>::max();
      }
      ranks += std::min<int64_t>(bins, small);
    }
    return ranks;
  };

  double hi = 0;
  for (int32_t i = 0; i < num_docs; ++i) hi = std::max(hi, cand_t[begin[static_cast<size_t>(i)]]);
  if (needed(std::numeric_limits<double>::infinity()) > m.n) return false;
  int guard = 0;
  while (needed(hi) > m.n && guard++ < 200) hi = hi > 0 ? hi * 2 : 1e-9;
  if (needed(hi) > m.n) return false;
  double lo = 0;
  if (needed(lo) <= m.n) hi = lo;
  for (int it = 0; it < 60 && hi > lo; ++it) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (needed(mid) <= m.n) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  const double tau = hi;

  // Sizes at tau.
  struct Big {
    int32_t doc;
    int32_t i;  // position in order
    size_t j;   // index into cand_*
  };
  std::vector<Big> bigs;
  std::vector<int32_t> small;  // documents, longest first
  int64_t used = 0;
  for (int32_t i = 0; i < num_docs; ++i) {
    const auto j = static_cast<size_t>(choose(i, tau));
    const int32_t doc = order[static_cast<size_t>(i)];
    if (cand_k[j] == 1) {
      small.push_back(doc);
    } else {
      bigs.push_back({doc, i, j});
      used += cand_k[j];
    }
  }
  const int64_t bins = std::min<int64_t>(m.n - used, static_cast<int64_t>(small.size()));
  int64_t left = m.n - used - bins;

  // Short documents onto `bins` single ranks: the least loaded (attention, then tokens, then index) that holds it;
  // with use_slack, one that no rank holds goes to the long document's group with the most room left. When neither
  // holds it, the exact packing (fill_bins) over the same rooms decides.
  Lists bin_docs(static_cast<size_t>(bins));
  Lists big_docs(bigs.size());
  std::vector<int64_t> big_room(bigs.size(), 0);
  if (use_slack) {
    for (size_t b = 0; b < bigs.size(); ++b) {
      big_room[b] = saturating_mul(cand_k[bigs[b].j], cap) - p.lengths[static_cast<size_t>(bigs[b].doc)];
    }
  }
  bool greedy = true;
  {
    using Load = std::tuple<double, int64_t, int32_t>;
    std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
    for (int32_t b = 0; b < bins; ++b) loads.emplace(0.0, 0, b);
    std::vector<Load> skipped;
    for (const int32_t d : small) {
      const int64_t l = p.lengths[static_cast<size_t>(d)];
      skipped.clear();
      while (!loads.empty() && std::get<1>(loads.top()) + l > cap) {
        skipped.push_back(loads.top());
        loads.pop();
      }
      if (loads.empty()) {
        for (const Load& s : skipped) loads.push(s);
        const auto room = std::max_element(big_room.begin(), big_room.end());
        if (room == big_room.end() || *room < l) {
          greedy = false;
          break;
        }
        *room -= l;
        big_docs[static_cast<size_t>(room - big_room.begin())].push_back(d);
        continue;
      }
      auto [t, tokens, b] = loads.top();
      loads.pop();
      const double dl = static_cast<double>(l);
      loads.emplace(t + full * dl * dl + lin * dl, tokens + l, b);
      bin_docs[static_cast<size_t>(b)].push_back(d);
      for (const Load& s : skipped) loads.push(s);
    }
  }
  if (!greedy) {
    std::vector<int64_t> room(static_cast<size_t>(bins), cap);
    for (size_t b = 0; b < bigs.size(); ++b) {
      room.push_back(use_slack ? saturating_mul(cand_k[bigs[b].j], cap) - p.lengths[static_cast<size_t>(bigs[b].doc)]
                               : 0);
    }
    Lists packed;
    if (!fill_bins(p.lengths.data(), small, room, packed, budget)) return false;
    for (size_t b = 0; b < static_cast<size_t>(bins); ++b) bin_docs[b] = std::move(packed[b]);
    for (size_t b = 0; b < bigs.size(); ++b) big_docs[b] = std::move(packed[static_cast<size_t>(bins) + b]);
  }
  double slowest_bin = 0;
  for (const auto& docs : bin_docs) {
    const Work w = work_of(p, docs);
    slowest_bin = std::max(slowest_bin, p.model.attention_seconds(w.sum_sq, w.sum, 1.0));
  }

  // Ranks left grow the slowest groups, one candidate step at a time, while that lowers the estimate.
  {
    using Slow = std::pair<double, int32_t>;  // (estimate, index into bigs): the largest pops first
    std::priority_queue<Slow, std::vector<Slow>, std::function<bool(const Slow&, const Slow&)>> slow(
        [](const Slow& a, const Slow& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    for (size_t b = 0; b < bigs.size(); ++b) slow.emplace(cand_t[bigs[b].j], static_cast<int32_t>(b));
    while (left > 0 && !slow.empty()) {
      const auto [t, b] = slow.top();
      if (t <= slowest_bin) break;
      slow.pop();
      Big& big = bigs[static_cast<size_t>(b)];
      const int32_t k = cand_k[big.j];
      size_t next = 0;
      for (size_t j = big.j + 1; j < begin[static_cast<size_t>(big.i) + 1]; ++j) {
        if (cand_k[j] - k <= left && cand_t[j] < t) {
          next = j;
          break;
        }
      }
      if (next == 0) break;  // the slowest cannot get faster: the max stays
      left -= cand_k[next] - k;
      big.j = next;
      slow.emplace(cand_t[next], b);
    }
  }

  sizes_out.clear();
  docs_out.clear();
  for (size_t b = 0; b < bigs.size(); ++b) {
    sizes_out.push_back(cand_k[bigs[b].j]);
    std::vector<int32_t> docs = std::move(big_docs[b]);
    docs.push_back(bigs[b].doc);
    std::sort(docs.begin(), docs.end());
    docs_out.push_back(std::move(docs));
  }
  for (auto& docs : bin_docs) {
    std::sort(docs.begin(), docs.end());
    sizes_out.push_back(1);
    docs_out.push_back(std::move(docs));
  }
  for (int64_t r = 0; r < left; ++r) {
    sizes_out.push_back(1);
    docs_out.emplace_back();
  }
  return true;
}

// Small worlds only (N <= kNearlyEqualMaxRanks): G groups of nearly equal sizes (split_count(N, G, g) ranks) for
// every G not dividing N (N = 3: 2 + 1), documents longest first each to the group whose estimate grows least
// (ties: the lower group) among those that still hold it. False when one does not fit.
constexpr int32_t kNearlyEqualMaxRanks = 32;

// The exact packings (fill_bins) of the mixed and nearly equal plans of one plan_batch call share this many
// subset-sum cells (bits: milliseconds, 16 MB at most); each uniform K has group_documents's own.
constexpr int64_t kPlannerFillBudget = kFillBinsBudget;

bool nearly_equal_plan(const BatchProblem& p, const Machine& m, int32_t g, int64_t& budget, std::vector<int32_t>& sizes,
                       Lists& docs) {
  const auto num_docs = static_cast<int32_t>(p.lengths.size());
  std::vector<int32_t> order(static_cast<size_t>(num_docs));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return p.lengths[a] != p.lengths[b] ? p.lengths[a] > p.lengths[b] : a < b; });
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

BatchPlan to_plan(const BatchProblem& p, const Machine& m, Candidate c) {
  BatchPlan plan;
  plan.group_of.assign(static_cast<size_t>(m.n), -1);
  plan.position_of.assign(static_cast<size_t>(m.n), -1);
  plan.doc_group.assign(p.lengths.size(), -1);
  plan.groups.resize(c.members.size());
  for (size_t g = 0; g < c.members.size(); ++g) {
    BatchGroup& group = plan.groups[g];
    group.members = std::move(c.members[g]);
    group.docs = std::move(c.docs[g]);
    group.predicted_seconds = c.times[g];
    for (size_t l = 0; l < group.members.size(); ++l) {
      plan.group_of[static_cast<size_t>(group.members[l])] = static_cast<int32_t>(g);
      plan.position_of[static_cast<size_t>(group.members[l])] = static_cast<int32_t>(l);
    }
    for (const int32_t d : group.docs) {
      plan.doc_group[static_cast<size_t>(d)] = static_cast<int32_t>(g);
      group.tokens += p.lengths[static_cast<size_t>(d)];
    }
    BASP_CHECK(ceil_div(group.tokens, static_cast<int64_t>(group.members.size())) <= p.capacity, BASP_ERROR_INTERNAL,
               "the batch planner overfilled group ", g, " (", group.tokens, " tokens on ", group.members.size(),
               " ranks of capacity ", p.capacity, ")");
  }
  plan.predicted_seconds = c.max;
  return plan;
}

}  // namespace

BatchPlan plan_batch(const BatchProblem& problem) {
  check_problem(problem);
  const Machine m = make_machine(problem.machine);
  int64_t longest = 0;
  for (const int64_t l : problem.lengths) longest = std::max(longest, l);

  Candidate best;
  int64_t budget = kPlannerFillBudget;
  uniform_plans(problem, m, longest, best);
  std::vector<int32_t> sizes;
  Lists docs;
  for (const bool use_slack : {false, true}) {
    if (!mixed_plan(problem, m, use_slack, budget, sizes, docs)) continue;
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
  return to_plan(problem, m, std::move(best));
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
  return max_of(group_times(problem, make_machine(problem.machine), members, docs));
}

}  // namespace basp::plan
