#include "plan/batch_model.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace basp::plan::batch_internal {

namespace {

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

int64_t busiest_query_heads(const BatchProblem& p, int32_t k) { return ceil_div(p.query_heads, k); }
int64_t busiest_kv_heads(const BatchProblem& p, int32_t k) { return std::max<int64_t>(1, ceil_div(p.kv_heads, k)); }

}  // namespace

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

double estimate(const BatchProblem& p, const Machine& m, int32_t k, int64_t tokens, double sum_sq, double sum) {
  double t = p.model.attention_seconds(sum_sq, sum, share(p, k));
  if (k <= 1) return t;
  const int32_t inside = std::min(k, m.unit_ranks);
  const double local = inside - 1;
  const double out = static_cast<double>(k - inside) * std::min(k, m.node_ranks);
  const double s = scatter_per_peer(p, k, tokens), g = gather_per_peer(p, k, tokens);
  return t + p.model.exchange_seconds(k, s * local, s * out) + p.model.exchange_seconds(k, g * local, g * out);
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
