#include "plan/batch_model.h"

#include <algorithm>
#include <numeric>

namespace basp::plan::batch_internal {

namespace {

int64_t busiest_query_heads(const BatchProblem& p, int32_t k) { return ceil_div(p.query_heads, k); }
int64_t busiest_kv_heads(const BatchProblem& p, int32_t k) { return std::max<int64_t>(1, ceil_div(p.kv_heads, k)); }

}  // namespace

// Bytes per token: check_problem has checked that the whole batch's (k = 1) fit in int64, and a rank's heads are
// never more than the whole tensor's.
double scatter_per_peer(const BatchProblem& p, int32_t k, int64_t tokens) {
  const int64_t row = busiest_query_heads(p, k) * p.head_dim + busiest_kv_heads(p, k) * (p.head_dim + value_dim(p));
  return static_cast<double>(ceil_div(tokens, k)) * static_cast<double>(row * p.elem_size);
}
double gather_per_peer(const BatchProblem& p, int32_t k, int64_t tokens) {
  return static_cast<double>(ceil_div(tokens, k)) *
         static_cast<double>(busiest_query_heads(p, k) * value_dim(p) * p.elem_size);
}
double share(const BatchProblem& p, int32_t k) {
  return static_cast<double>(busiest_query_heads(p, k)) / static_cast<double>(p.query_heads);
}

double attention_seconds(const BatchProblem& p, double sum_sq, double sum, double share) {
  const double t = p.model.attention_seconds(sum_sq, sum, share);
  const int64_t dv = value_dim(p);
  if (dv == p.head_dim) return t;
  return t * ((static_cast<double>(p.head_dim) + static_cast<double>(dv)) / (2.0 * static_cast<double>(p.head_dim)));
}

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

std::vector<double> group_times(const BatchProblem& p, const UnitMap& m, const Lists& members, const Lists& docs) {
  const size_t groups = members.size();
  std::vector<Work> work(groups);
  std::vector<double> pps(groups, 0.0), ppg(groups, 0.0);
  for (size_t g = 0; g < groups; ++g) {
    const auto k = static_cast<int32_t>(members[g].size());
    work[g] = work_of(p, docs[g]);
    if (k <= 1) continue;
    pps[g] = scatter_per_peer(p, k, work[g].tokens);
    ppg[g] = gather_per_peer(p, k, work[g].tokens);
  }
  const std::vector<GroupTraffic> scatter = membership_traffic(m, members, pps);
  const std::vector<GroupTraffic> gather = membership_traffic(m, members, ppg);
  std::vector<double> times(groups);
  for (size_t g = 0; g < groups; ++g) {
    const auto k = static_cast<int32_t>(members[g].size());
    times[g] = attention_seconds(p, work[g].sum_sq, work[g].sum, share(p, k));
    if (k <= 1) continue;
    times[g] += p.model.exchange_seconds(k, scatter[g].node_bytes, scatter[g].network_bytes) +
                p.model.exchange_seconds(k, gather[g].node_bytes, gather[g].network_bytes);
  }
  return times;
}

double estimate(const BatchProblem& p, const UnitMap& m, int32_t k, int64_t tokens, double sum_sq, double sum) {
  double t = attention_seconds(p, sum_sq, sum, share(p, k));
  if (k <= 1) return t;
  const GroupTraffic s = estimate_traffic(m, k, scatter_per_peer(p, k, tokens));
  const GroupTraffic g = estimate_traffic(m, k, gather_per_peer(p, k, tokens));
  return t + p.model.exchange_seconds(k, s.node_bytes, s.network_bytes) +
         p.model.exchange_seconds(k, g.node_bytes, g.network_bytes);
}

double max_of(const std::vector<double>& v) {
  double out = 0;
  for (const double x : v) out = std::max(out, x);
  return out;
}

std::vector<int32_t> longest_first(const BatchProblem& p) {
  std::vector<int32_t> order(p.lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return p.lengths[a] != p.lengths[b] ? p.lengths[a] > p.lengths[b] : a < b; });
  return order;
}

}  // namespace basp::plan::batch_internal
