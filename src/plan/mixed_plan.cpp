#include "plan/mixed_plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "plan/documents.h"

namespace basp::plan::batch_internal {

namespace {

// The candidate sizes of every document and their estimates, per document (by position in the longest-first
// order), flattened: document i's candidates are [begin[i], begin[i + 1]), sizes ascending.
struct SizeOptions {
  std::vector<size_t> begin;
  std::vector<int32_t> k;
  std::vector<double> t;

  // The first candidate of document i whose estimate is within tau (an index into k and t), or -1.
  int64_t choose(int32_t i, double tau) const {
    for (size_t j = begin[static_cast<size_t>(i)]; j < begin[static_cast<size_t>(i) + 1]; ++j) {
      if (t[j] <= tau) return static_cast<int64_t>(j);
    }
    return -1;
  }
};

// What every step of one mixed plan reads.
struct MixedInput {
  const BatchProblem& p;
  const UnitMap& m;
  bool use_slack;
  std::vector<int32_t> order;  // documents, longest first
  SizeOptions options;
  double full;  // attention seconds of one unit of sum L^2 at share 1
  double lin;   // attention seconds of one unit of sum L at share 1

  int64_t length(int32_t doc) const { return p.lengths[static_cast<size_t>(doc)]; }
  // The tokens a group of k ranks holding `doc` has room for beside it.
  int64_t room_beside(int32_t k, int32_t doc) const { return saturating_mul(k, p.capacity) - length(doc); }
};

// A long document, alone in a group of options.k[j] ranks.
struct Big {
  int32_t doc;
  int32_t i;  // position in order
  size_t j;   // index into options
};

// The sizes at the target time: the long documents, the short ones (longest first), the single ranks the short
// ones are packed onto and the ranks left over.
struct Split {
  std::vector<Big> bigs;
  std::vector<int32_t> small;
  int64_t bins = 0;
  int64_t left = 0;
};

// The short documents of each single rank, and those each long document's group takes beside it.
struct Packing {
  Lists bin_docs;
  Lists big_docs;
};

// Step 1: every document's candidate sizes (K_min and each K where the query-head share drops) and estimates.
SizeOptions size_options(const BatchProblem& p, const UnitMap& m, const std::vector<int32_t>& order) {
  // The K that change the busiest rank's query heads: K = 1 and every K where ceil(Hq / K) drops.
  std::vector<int32_t> steps;
  for (int64_t k = 1; k <= std::min<int64_t>(p.query_heads, m.n); ++k) {
    if (k == 1 || ceil_div(p.query_heads, k) < ceil_div(p.query_heads, k - 1)) steps.push_back(static_cast<int32_t>(k));
  }
  SizeOptions o;
  o.begin.assign(order.size() + 1, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t l = p.lengths[static_cast<size_t>(order[i])];
    const auto kmin = static_cast<int32_t>(ceil_div(l, p.capacity));
    const double sum = static_cast<double>(l), sum_sq = sum * sum;
    o.k.push_back(kmin);
    o.t.push_back(estimate(p, m, kmin, l, sum_sq, sum));
    for (const int32_t k : steps) {
      if (k <= kmin) continue;
      o.k.push_back(k);
      o.t.push_back(estimate(p, m, k, l, sum_sq, sum));
    }
    o.begin[i + 1] = o.k.size();
  }
  return o;
}

// Step 2: the ranks the plan at target tau needs (INT64_MAX when a document has no candidate within tau).
int64_t ranks_needed(const MixedInput& in, double tau) {
  const int64_t cap = in.p.capacity;
  int64_t ranks = 0, small_tokens = 0, small = 0, slack = 0;
  double small_work = 0;
  for (size_t i = 0; i < in.order.size(); ++i) {
    const int64_t j = in.options.choose(static_cast<int32_t>(i), tau);
    if (j < 0) return std::numeric_limits<int64_t>::max();
    const int32_t k = in.options.k[static_cast<size_t>(j)];
    if (in.use_slack && k > 1) slack += in.room_beside(k, in.order[i]);
    if (k == 1) {
      const auto l = static_cast<double>(in.length(in.order[i]));
      small_tokens += in.length(in.order[i]);
      small_work += in.full * l * l + in.lin * l;
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
}

// Step 3: the smallest target time whose ranks fit in N, by bisection; false when no target fits.
bool smallest_target(const MixedInput& in, double& tau) {
  const int32_t n = in.m.n;
  double hi = 0;
  for (size_t i = 0; i < in.order.size(); ++i) hi = std::max(hi, in.options.t[in.options.begin[i]]);
  if (ranks_needed(in, std::numeric_limits<double>::infinity()) > n) return false;
  int guard = 0;
  while (ranks_needed(in, hi) > n && guard++ < 200) hi = hi > 0 ? hi * 2 : 1e-9;
  if (ranks_needed(in, hi) > n) return false;
  double lo = 0;
  if (ranks_needed(in, lo) <= n) hi = lo;
  for (int it = 0; it < 60 && hi > lo; ++it) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (ranks_needed(in, mid) <= n) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  tau = hi;
  return true;
}

// Step 4: the sizes at tau: long documents with their K, short ones onto min(ranks free, their count) single ranks.
Split split_at(const MixedInput& in, double tau) {
  Split s;
  int64_t used = 0;
  for (size_t i = 0; i < in.order.size(); ++i) {
    const auto j = static_cast<size_t>(in.options.choose(static_cast<int32_t>(i), tau));
    const int32_t doc = in.order[i];
    if (in.options.k[j] == 1) {
      s.small.push_back(doc);
    } else {
      s.bigs.push_back({doc, static_cast<int32_t>(i), j});
      used += in.options.k[j];
    }
  }
  s.bins = std::min<int64_t>(in.m.n - used, static_cast<int64_t>(s.small.size()));
  s.left = in.m.n - used - s.bins;
  return s;
}

// Step 5a: each short document to the least loaded single rank (attention, then tokens, then index) that holds it;
// with use_slack, one that no rank holds to the long document's group with the most room left. False when neither
// holds one (the packing is then partial).
bool pack_greedy(const MixedInput& in, const Split& s, Packing& out) {
  std::vector<int64_t> big_room(s.bigs.size(), 0);
  if (in.use_slack) {
    for (size_t b = 0; b < s.bigs.size(); ++b) big_room[b] = in.room_beside(in.options.k[s.bigs[b].j], s.bigs[b].doc);
  }
  using Load = std::tuple<double, int64_t, int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (int32_t b = 0; b < s.bins; ++b) loads.emplace(0.0, 0, b);
  std::vector<Load> skipped;
  for (const int32_t d : s.small) {
    const int64_t l = in.length(d);
    skipped.clear();
    while (!loads.empty() && std::get<1>(loads.top()) + l > in.p.capacity) {
      skipped.push_back(loads.top());
      loads.pop();
    }
    if (loads.empty()) {
      for (const Load& sk : skipped) loads.push(sk);
      const auto room = std::max_element(big_room.begin(), big_room.end());
      if (room == big_room.end() || *room < l) return false;
      *room -= l;
      out.big_docs[static_cast<size_t>(room - big_room.begin())].push_back(d);
      continue;
    }
    auto [t, tokens, b] = loads.top();
    loads.pop();
    const double dl = static_cast<double>(l);
    loads.emplace(t + in.full * dl * dl + in.lin * dl, tokens + l, b);
    out.bin_docs[static_cast<size_t>(b)].push_back(d);
    for (const Load& sk : skipped) loads.push(sk);
  }
  return true;
}

// Step 5b: when the greedy fails, the exact packing (fill_bins) over the same rooms; false when it finds none.
bool pack_exact(const MixedInput& in, const Split& s, int64_t& budget, Packing& out) {
  std::vector<int64_t> room(static_cast<size_t>(s.bins), in.p.capacity);
  for (const Big& big : s.bigs) room.push_back(in.use_slack ? in.room_beside(in.options.k[big.j], big.doc) : 0);
  Lists packed;
  if (!fill_bins(in.p.lengths.data(), s.small, room, packed, budget)) return false;
  const auto bins = static_cast<size_t>(s.bins);
  for (size_t b = 0; b < bins; ++b) out.bin_docs[b] = std::move(packed[b]);
  for (size_t b = 0; b < s.bigs.size(); ++b) out.big_docs[b] = std::move(packed[bins + b]);
  return true;
}

// The slowest single rank's attention time.
double slowest_bin(const MixedInput& in, const Lists& bin_docs) {
  double slowest = 0;
  for (const auto& docs : bin_docs) {
    const Work w = work_of(in.p, docs);
    slowest = std::max(slowest, attention_seconds(in.p, w.sum_sq, w.sum, 1.0));
  }
  return slowest;
}

// Step 6: ranks left grow the slowest groups, one candidate step at a time, while that lowers the estimate.
void grow_slowest(const MixedInput& in, double slowest_bin, Split& s) {
  const SizeOptions& o = in.options;
  using Slow = std::pair<double, int32_t>;  // (estimate, index into bigs): the largest pops first
  std::priority_queue<Slow, std::vector<Slow>, std::function<bool(const Slow&, const Slow&)>> slow(
      [](const Slow& a, const Slow& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
  for (size_t b = 0; b < s.bigs.size(); ++b) slow.emplace(o.t[s.bigs[b].j], static_cast<int32_t>(b));
  while (s.left > 0 && !slow.empty()) {
    const auto [t, b] = slow.top();
    if (t <= slowest_bin) break;
    slow.pop();
    Big& big = s.bigs[static_cast<size_t>(b)];
    const int32_t k = o.k[big.j];
    size_t next = 0;
    for (size_t j = big.j + 1; j < o.begin[static_cast<size_t>(big.i) + 1]; ++j) {
      if (o.k[j] - k <= s.left && o.t[j] < t) {
        next = j;
        break;
      }
    }
    if (next == 0) break;  // the slowest cannot get faster: the max stays
    s.left -= o.k[next] - k;
    big.j = next;
    slow.emplace(o.t[next], b);
  }
}

// Step 7: the groups' sizes and documents (ascending): the long documents' groups, the single ranks, the empty ranks.
void emit(const MixedInput& in, const Split& s, Packing& packing, std::vector<int32_t>& sizes_out, Lists& docs_out) {
  sizes_out.clear();
  docs_out.clear();
  for (size_t b = 0; b < s.bigs.size(); ++b) {
    sizes_out.push_back(in.options.k[s.bigs[b].j]);
    std::vector<int32_t> docs = std::move(packing.big_docs[b]);
    docs.push_back(s.bigs[b].doc);
    std::sort(docs.begin(), docs.end());
    docs_out.push_back(std::move(docs));
  }
  for (auto& docs : packing.bin_docs) {
    std::sort(docs.begin(), docs.end());
    sizes_out.push_back(1);
    docs_out.push_back(std::move(docs));
  }
  for (int64_t r = 0; r < s.left; ++r) {
    sizes_out.push_back(1);
    docs_out.emplace_back();
  }
}

}  // namespace

bool mixed_plan(const BatchProblem& p, const UnitMap& m, bool use_slack, int64_t& budget,
                std::vector<int32_t>& sizes_out, Lists& docs_out) {
  MixedInput in{p, m, use_slack, longest_first(p), {}, 0, 0};
  in.options = size_options(p, m, in.order);  // 1. candidate sizes and estimates per document
  in.full = attention_seconds(p, 1.0, 0.0, 1.0);
  in.lin = attention_seconds(p, 0.0, 1.0, 1.0);
  double tau = 0;
  if (!smallest_target(in, tau)) return false;  // 2-3. the smallest target time that fits in N
  Split split = split_at(in, tau);              // 4. long documents' sizes, short ones' ranks
  Packing packing{Lists(static_cast<size_t>(split.bins)), Lists(split.bigs.size())};
  if (!pack_greedy(in, split, packing) && !pack_exact(in, split, budget, packing)) return false;  // 5. pack
  grow_slowest(in, slowest_bin(in, packing.bin_docs), split);  // 6. spare ranks to the slowest groups
  emit(in, split, packing, sizes_out, docs_out);               // 7. the groups' sizes and documents
  return true;
}

}  // namespace basp::plan::batch_internal
