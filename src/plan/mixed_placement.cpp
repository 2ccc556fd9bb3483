// Mixed-size placement (batch_planner.h): groups of any sizes placed by placement.h's rules.
//
// Sizes all equal: exactly place_groups (the same rules for one K). Otherwise, sizes in decreasing order (ties: the
// earlier size first, which does not matter for the result since equal sizes are interchangeable):
//   1. a group that fits in the free ranks of one node takes the node with the fewest free ranks that still holds
//      it (best fit; ties: the lowest node), so that small groups fill node leftovers and keep whole nodes whole;
//   2. otherwise a group that fits in the free ranks of one NVLink domain takes the domain with the fewest free
//      ranks that holds it, and inside it the nodes greedily: a node holding exactly what is still needed, else
//      the node with the most free ranks (whole nodes first, so a group larger than a node takes whole nodes),
//      and when every node holds more than what is needed, the smallest of them (one more node, the fewest cut);
//   3. otherwise the same greedy over all nodes of all domains.
// Then inside each node plan::partition_node splits the node's ranks into the parts of its groups (strongest
// NVLink inside the parts); identical nodes with identical parts are solved once.
#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "plan/batch_planner.h"
#include "plan/node_partition.h"

namespace basp::plan {

namespace {

struct MixedUnit : NodeShare {
  int32_t domain = 0;
};

// Free ranks per unit, searchable by count: (free, unit) pairs, units with no free rank absent.
using FreeSet = std::set<std::pair<int32_t, int32_t>>;

// The lowest unit among those with the most free ranks.
FreeSet::iterator largest(FreeSet& set) {
  const int32_t most = set.rbegin()->first;
  return set.lower_bound({most, INT32_MIN});
}

}  // namespace

std::vector<std::vector<int32_t>> place_mixed_groups(const PlacementInput& input, const std::vector<int32_t>& sizes) {
  const auto n = static_cast<int32_t>(input.ranks.size());
  BASP_CHECK_ARG(n > 0, "placement needs at least one rank");
  BASP_CHECK_ARG(!sizes.empty(), "sizes is empty");
  int64_t sum = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    BASP_CHECK_ARG(sizes[g] > 0, "sizes[", g, "] (", sizes[g], ") must be positive");
    sum += sizes[g];
  }
  BASP_CHECK_ARG(sum == n, "the sizes sum to ", sum, ", not the world size (", n, ")");
  if (std::all_of(sizes.begin(), sizes.end(), [&](int32_t s) { return s == sizes.front(); })) {
    return place_groups(input, static_cast<int32_t>(sizes.size()));  // checks the input too
  }
  for (size_t r = 0; r < input.ranks.size(); ++r) {
    const RankPlace& p = input.ranks[r];
    BASP_CHECK_ARG(p.gpu >= -1, "rank ", r, " has GPU index ", p.gpu, " (expected -1 or a local index)");
    auto it = input.nodes.find(p.node);
    if (it != input.nodes.end()) {
      const auto g = static_cast<size_t>(std::max(it->second.num_gpus, 0));
      BASP_CHECK_ARG(it->second.bandwidth.size() == g * g && it->second.locality.size() == g * g, "node ", p.node,
                     " has link matrices of ", it->second.bandwidth.size(), " and ", it->second.locality.size(),
                     " entries for ", g, " GPUs");
      BASP_CHECK_ARG(p.gpu < it->second.num_gpus, "rank ", r, " has GPU index ", p.gpu, " but its node lists ",
                     it->second.num_gpus, " GPUs");
    }
  }

  // Domains and units (node inside domain), numbered in order of their lowest rank, as place_groups does.
  std::unordered_map<uint64_t, int32_t> fabric_domain, node_domain;
  std::map<std::pair<int32_t, uint64_t>, int32_t> unit_of;
  int32_t num_domains = 0;
  std::vector<MixedUnit> units;
  for (int32_t r = 0; r < n; ++r) {
    const RankPlace& p = input.ranks[static_cast<size_t>(r)];
    auto& table = p.domain != 0 ? fabric_domain : node_domain;
    auto d = table.emplace(p.domain != 0 ? p.domain : p.node, num_domains);
    if (d.second) ++num_domains;
    auto u = unit_of.emplace(std::make_pair(d.first->second, p.node), static_cast<int32_t>(units.size()));
    if (u.second) {
      units.emplace_back();
      units.back().node = p.node;
      units.back().domain = d.first->second;
    }
    units[static_cast<size_t>(u.first->second)].ranks.push_back(r);
  }

  FreeSet all;
  std::vector<FreeSet> in_domain(static_cast<size_t>(num_domains));
  std::set<std::pair<int64_t, int32_t>> domains;  // (free ranks, domain)
  std::vector<int32_t> free(units.size());
  std::vector<int64_t> domain_free(static_cast<size_t>(num_domains), 0);
  for (size_t u = 0; u < units.size(); ++u) {
    free[u] = static_cast<int32_t>(units[u].ranks.size());
    all.emplace(free[u], static_cast<int32_t>(u));
    in_domain[static_cast<size_t>(units[u].domain)].emplace(free[u], static_cast<int32_t>(u));
    domain_free[static_cast<size_t>(units[u].domain)] += free[u];
  }
  for (int32_t d = 0; d < num_domains; ++d) domains.emplace(domain_free[static_cast<size_t>(d)], d);

  auto take = [&](int32_t u, int32_t count, int32_t group) {
    const auto su = static_cast<size_t>(u);
    const int32_t dom = units[su].domain;
    const auto sd = static_cast<size_t>(dom);
    all.erase({free[su], u});
    in_domain[sd].erase({free[su], u});
    domains.erase({domain_free[sd], dom});
    free[su] -= count;
    domain_free[sd] -= count;
    if (free[su] > 0) {
      all.emplace(free[su], u);
      in_domain[sd].emplace(free[su], u);
    }
    if (domain_free[sd] > 0) domains.emplace(domain_free[sd], dom);
    units[su].parts.emplace_back(count, group);
  };
  // The greedy of rules 2 and 3 over one set of units.
  auto take_greedy = [&](FreeSet& set, int32_t need, int32_t group) {
    while (need > 0) {
      auto exact = set.lower_bound({need, INT32_MIN});
      int32_t u = 0;
      int32_t count = need;
      if (exact != set.end() && exact->first == need) {
        u = exact->second;
      } else if (set.rbegin()->first < need) {
        auto most = largest(set);
        u = most->second;
        count = most->first;
      } else {
        u = exact->second;  // the smallest unit holding more than the need
      }
      take(u, count, group);  // invalidates iterators of `set`
      need -= count;
    }
  };

  std::vector<int32_t> order(sizes.size());
  for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int32_t>(g);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sizes[a] > sizes[b]; });
  for (const int32_t g : order) {
    const int32_t k = sizes[static_cast<size_t>(g)];
    auto fit = all.lower_bound({k, INT32_MIN});
    if (fit != all.end()) {
      take(fit->second, k, g);
      continue;
    }
    auto dom = domains.lower_bound({k, INT32_MIN});
    if (dom != domains.end()) {
      take_greedy(in_domain[static_cast<size_t>(dom->second)], k, g);
    } else {
      take_greedy(all, k, g);
    }
  }

  std::vector<NodeShare> shares;
  shares.reserve(units.size());
  for (MixedUnit& unit : units) shares.push_back(std::move(static_cast<NodeShare&>(unit)));
  return members_of_shares(input, shares, sizes.size());
}

}  // namespace basp::plan
