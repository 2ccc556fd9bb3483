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

// Step 1: checks the world and the sizes (each positive, summing to N).
void check_sizes(const PlacementInput& input, const std::vector<int32_t>& sizes) {
  const auto n = static_cast<int32_t>(input.ranks.size());
  BASP_CHECK_ARG(n > 0, "placement needs at least one rank");
  BASP_CHECK_ARG(!sizes.empty(), "sizes is empty");
  int64_t sum = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    BASP_CHECK_ARG(sizes[g] > 0, "sizes[", g, "] (", sizes[g], ") must be positive");
    sum += sizes[g];
  }
  BASP_CHECK_ARG(sum == n, "the sizes sum to ", sum, ", not the world size (", n, ")");
}

// Step 2: checks every rank's GPU index against its node's link matrices (place_groups checks them for equal sizes).
void check_machine(const PlacementInput& input) {
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
}

// Step 3: domains and units (node inside domain), numbered in order of their lowest rank, as place_groups does.
std::vector<MixedUnit> make_units(const PlacementInput& input, int32_t& num_domains) {
  std::unordered_map<uint64_t, int32_t> fabric_domain, node_domain;
  std::map<std::pair<int32_t, uint64_t>, int32_t> unit_of;
  num_domains = 0;
  std::vector<MixedUnit> units;
  for (int32_t r = 0; r < static_cast<int32_t>(input.ranks.size()); ++r) {
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
  return units;
}

// The free ranks of every unit and domain while groups are placed, and the rules that place one group.
class FreeRanks {
 public:
  FreeRanks(std::vector<MixedUnit>& units, int32_t num_domains)
      : units_(units),
        in_domain_(static_cast<size_t>(num_domains)),
        free_(units.size()),
        domain_free_(static_cast<size_t>(num_domains), 0) {
    for (size_t u = 0; u < units_.size(); ++u) {
      free_[u] = static_cast<int32_t>(units_[u].ranks.size());
      all_.emplace(free_[u], static_cast<int32_t>(u));
      in_domain_[static_cast<size_t>(units_[u].domain)].emplace(free_[u], static_cast<int32_t>(u));
      domain_free_[static_cast<size_t>(units_[u].domain)] += free_[u];
    }
    for (int32_t d = 0; d < num_domains; ++d) domains_.emplace(domain_free_[static_cast<size_t>(d)], d);
  }

  // Step 4 (per group): rule 1 (one node, best fit), else rule 2 (one domain, greedy), else rule 3 (greedy).
  void place(int32_t k, int32_t g) {
    auto fit = all_.lower_bound({k, INT32_MIN});
    if (fit != all_.end()) {
      take(fit->second, k, g);
      return;
    }
    auto dom = domains_.lower_bound({k, INT32_MIN});
    if (dom != domains_.end()) {
      take_greedy(in_domain_[static_cast<size_t>(dom->second)], k, g);
    } else {
      take_greedy(all_, k, g);
    }
  }

 private:
  // `count` free ranks of unit u to `group`.
  void take(int32_t u, int32_t count, int32_t group) {
    const auto su = static_cast<size_t>(u);
    const int32_t dom = units_[su].domain;
    const auto sd = static_cast<size_t>(dom);
    all_.erase({free_[su], u});
    in_domain_[sd].erase({free_[su], u});
    domains_.erase({domain_free_[sd], dom});
    free_[su] -= count;
    domain_free_[sd] -= count;
    if (free_[su] > 0) {
      all_.emplace(free_[su], u);
      in_domain_[sd].emplace(free_[su], u);
    }
    if (domain_free_[sd] > 0) domains_.emplace(domain_free_[sd], dom);
    units_[su].parts.emplace_back(count, group);
  }

  // The greedy of rules 2 and 3 over one set of units.
  void take_greedy(FreeSet& set, int32_t need, int32_t group) {
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
  }

  std::vector<MixedUnit>& units_;
  FreeSet all_;
  std::vector<FreeSet> in_domain_;
  std::set<std::pair<int64_t, int32_t>> domains_;  // (free ranks, domain)
  std::vector<int32_t> free_;
  std::vector<int64_t> domain_free_;
};

// The group indices, largest first (ties: the earlier group).
std::vector<int32_t> largest_first(const std::vector<int32_t>& sizes) {
  std::vector<int32_t> order(sizes.size());
  for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int32_t>(g);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sizes[a] > sizes[b]; });
  return order;
}

}  // namespace

std::vector<std::vector<int32_t>> place_mixed_groups(const PlacementInput& input, const std::vector<int32_t>& sizes) {
  check_sizes(input, sizes);
  if (std::all_of(sizes.begin(), sizes.end(), [&](int32_t s) { return s == sizes.front(); })) {
    return place_groups(input, static_cast<int32_t>(sizes.size()));  // checks the input too
  }
  check_machine(input);
  int32_t num_domains = 0;
  std::vector<MixedUnit> units = make_units(input, num_domains);
  FreeRanks free(units, num_domains);
  for (const int32_t g : largest_first(sizes)) free.place(sizes[static_cast<size_t>(g)], g);  // step 4

  // Step 5: inside each node, partition_node splits the node's ranks into the parts of its groups.
  std::vector<NodeShare> shares;
  shares.reserve(units.size());
  for (MixedUnit& unit : units) shares.push_back(std::move(static_cast<NodeShare&>(unit)));
  return members_of_shares(input, shares, sizes.size());
}

}  // namespace basp::plan
