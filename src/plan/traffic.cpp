#include "plan/traffic.h"

#include <algorithm>
#include <unordered_map>

namespace basp::plan {

namespace {

// The most common size among `count` ids (ties: the larger).
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

}  // namespace

UnitMap make_unit_map(const PlacementInput& machine) {
  UnitMap m;
  m.n = static_cast<int32_t>(machine.ranks.size());
  std::unordered_map<uint64_t, int32_t> domains, nodes_alone, nodes;
  for (const RankPlace& p : machine.ranks) {
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

std::vector<GroupTraffic> membership_traffic(const UnitMap& m, const std::vector<std::vector<int32_t>>& members,
                                             const std::vector<double>& per_peer) {
  const size_t groups = members.size();
  std::vector<GroupTraffic> out(groups);
  std::vector<int32_t> outside(static_cast<size_t>(m.n), 0);  // by rank: its peers outside its unit
  std::vector<int32_t> count(static_cast<size_t>(m.num_units), 0);
  std::vector<double> load(static_cast<size_t>(m.num_nodes), 0.0);  // by node: bytes its link carries
  for (size_t g = 0; g < groups; ++g) {
    const auto k = static_cast<int32_t>(members[g].size());
    if (k <= 1) continue;
    for (const int32_t r : members[g]) ++count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])];
    int32_t most_local = 0;
    for (const int32_t r : members[g]) {
      const int32_t c = count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])];
      most_local = std::max(most_local, c);
      outside[static_cast<size_t>(r)] = k - c;
      load[static_cast<size_t>(m.node_of[static_cast<size_t>(r)])] += per_peer[g] * (k - c);
    }
    for (const int32_t r : members[g]) count[static_cast<size_t>(m.unit_of[static_cast<size_t>(r)])] = 0;
    out[g].node_bytes = per_peer[g] * static_cast<double>(most_local - 1);
  }
  for (size_t g = 0; g < groups; ++g) {
    if (members[g].size() <= 1) continue;
    for (const int32_t r : members[g]) {
      if (outside[static_cast<size_t>(r)] == 0) continue;
      const double link = load[static_cast<size_t>(m.node_of[static_cast<size_t>(r)])];
      out[g].network_bytes = std::max(out[g].network_bytes, link);
    }
  }
  return out;
}

GroupTraffic estimate_traffic(const UnitMap& m, int32_t k, double per_peer) {
  GroupTraffic t;
  if (k <= 1) return t;
  const int32_t inside = std::min(k, m.unit_ranks);
  const double local = inside - 1;
  const double out = static_cast<double>(k - inside) * std::min(k, m.node_ranks);
  t.node_bytes = per_peer * local;
  t.network_bytes = per_peer * out;
  return t;
}

}  // namespace basp::plan
