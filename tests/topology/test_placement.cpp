// Placement as pure arithmetic (plan/placement.h, plan/node_partition.h): no hwloc, no files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "common/error.h"
#include "plan/groups.h"
#include "plan/node_partition.h"
#include "plan/placement.h"

using basp::plan::NodeLinks;
using basp::plan::PartitionProblem;
using basp::plan::PlacementInput;
using basp::plan::RankPlace;

namespace {

// Rank r on node node_of[r], no GPU.
PlacementInput nodes_only(const std::vector<uint64_t>& node_of) {
  PlacementInput in;
  for (uint64_t n : node_of) in.ranks.push_back(RankPlace{n + 1, 0, -1});
  return in;
}

NodeLinks links_from(int32_t n, const std::map<std::pair<int, int>, uint32_t>& bw) {
  NodeLinks l;
  l.num_gpus = n;
  l.bandwidth.assign(static_cast<size_t>(n * n), 0);
  l.locality.assign(static_cast<size_t>(n * n), basp::plan::kLocalityNumaNode);
  for (const auto& [pair, v] : bw) {
    l.bandwidth[static_cast<size_t>(pair.first * n + pair.second)] = v;
    l.bandwidth[static_cast<size_t>(pair.second * n + pair.first)] = v;
  }
  return l;
}

// Every rank in exactly one group, groups of equal size, groups ordered by lowest rank, members ascending.
void require_well_formed(const std::vector<std::vector<int32_t>>& g, int32_t n, int32_t num_groups) {
  REQUIRE(static_cast<int32_t>(g.size()) == num_groups);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (size_t i = 0; i < g.size(); ++i) {
    REQUIRE(static_cast<int32_t>(g[i].size()) == n / num_groups);
    REQUIRE(std::is_sorted(g[i].begin(), g[i].end()));
    if (i > 0) REQUIRE(g[i - 1].front() < g[i].front());
    for (int32_t r : g[i]) seen[static_cast<size_t>(r)]++;
  }
  for (int v : seen) REQUIRE(v == 1);
}

// The best score over every assignment of elements to parts: the reference the exhaustive search must reach.
basp::plan::PartitionScore brute_force_best(const PartitionProblem& p) {
  const auto parts = static_cast<int32_t>(p.part_sizes.size());
  std::vector<int32_t> part_of(static_cast<size_t>(p.size), 0);
  basp::plan::PartitionScore best;
  bool have = false;
  while (true) {
    std::vector<int32_t> count(static_cast<size_t>(parts), 0);
    for (int32_t x : part_of) count[static_cast<size_t>(x)]++;
    if (count == p.part_sizes) {
      const auto s = basp::plan::score_partition(p, part_of);
      if (!have || best < s) best = s;
      have = true;
    }
    int32_t i = 0;
    while (i < p.size && ++part_of[static_cast<size_t>(i)] == parts) part_of[static_cast<size_t>(i++)] = 0;
    if (i == p.size) break;
  }
  return best;
}

PartitionProblem random_problem(std::mt19937& rng, int32_t m, const std::vector<int32_t>& sizes) {
  PartitionProblem p;
  p.size = m;
  p.part_sizes = sizes;
  p.bandwidth.assign(static_cast<size_t>(m * m), 0);
  p.locality.assign(static_cast<size_t>(m * m), 0);
  std::uniform_int_distribution<int> bw(0, 3);  // few distinct values: many ties
  std::uniform_int_distribution<int> loc(0, 5);
  for (int32_t a = 0; a < m; ++a) {
    for (int32_t b = a + 1; b < m; ++b) {
      const auto w = static_cast<uint32_t>(bw(rng) * 25000);
      const auto l = static_cast<uint8_t>(loc(rng));
      p.bandwidth[static_cast<size_t>(a * m + b)] = p.bandwidth[static_cast<size_t>(b * m + a)] = w;
      p.locality[static_cast<size_t>(a * m + b)] = p.locality[static_cast<size_t>(b * m + a)] = l;
    }
  }
  return p;
}

}  // namespace

TEST_CASE("node-by-node numbering without link information reproduces the contiguous rule", "[placement]") {
  for (int32_t per_node : {1, 2, 3, 4, 6, 8}) {
    for (int32_t n = per_node; n <= 48; n += per_node) {
      std::vector<uint64_t> node_of;
      for (int32_t r = 0; r < n; ++r) node_of.push_back(static_cast<uint64_t>(r / per_node));
      const PlacementInput in = nodes_only(node_of);
      for (int32_t g = 1; g <= n; ++g) {
        const int32_t k = n % g == 0 ? n / g : 0;
        if (k == 0 || (k % per_node != 0 && per_node % k != 0)) continue;
        INFO("N=" << n << " ranks per node=" << per_node << " G=" << g);
        REQUIRE(basp::plan::place_groups(in, g) == basp::plan::contiguous_members(n, g));
      }
    }
  }
}

TEST_CASE("cyclic rank numbering: groups stay on one node, the contiguous rule does not", "[placement]") {
  // 16 ranks dealt round-robin over 2 nodes: rank r on node r % 2.
  std::vector<uint64_t> node_of;
  for (int32_t r = 0; r < 16; ++r) node_of.push_back(static_cast<uint64_t>(r % 2));
  const PlacementInput in = nodes_only(node_of);
  for (int32_t g : {2, 4, 8}) {
    const auto groups = basp::plan::place_groups(in, g);
    require_well_formed(groups, 16, g);
    for (const auto& members : groups) {
      for (int32_t r : members) REQUIRE(r % 2 == members.front() % 2);
    }
    // The paper's rule puts ranks of both nodes in every group here.
    for (const auto& members : basp::plan::contiguous_members(16, g)) REQUIRE(members[0] % 2 != members[1] % 2);
  }
  const auto two = basp::plan::place_groups(in, 2);
  REQUIRE(two[0] == std::vector<int32_t>{0, 2, 4, 6, 8, 10, 12, 14});
  REQUIRE(two[1] == std::vector<int32_t>{1, 3, 5, 7, 9, 11, 13, 15});
}

TEST_CASE("random worlds: well formed, whole-node and whole-domain groups where sizes allow", "[placement]") {
  std::mt19937 rng(20261201);
  for (int iter = 0; iter < 400; ++iter) {
    std::uniform_int_distribution<int32_t> nd(1, 64);
    const int32_t n = nd(rng);
    std::uniform_int_distribution<int> nodes_dist(1, 9);
    const int nodes = nodes_dist(rng);
    std::uniform_int_distribution<int> pick_node(0, nodes - 1);
    std::uniform_int_distribution<int> pick_domain(0, 2);
    std::vector<uint64_t> domain_of_node;
    for (int i = 0; i < nodes; ++i) domain_of_node.push_back(static_cast<uint64_t>(pick_domain(rng)));
    PlacementInput in;
    for (int32_t r = 0; r < n; ++r) {
      const int node = pick_node(rng);
      // Domain 0 = the node is its own domain; 1 and 2 are fabrics spanning nodes.
      in.ranks.push_back(RankPlace{static_cast<uint64_t>(node + 100), domain_of_node[static_cast<size_t>(node)], -1});
    }
    std::vector<int32_t> divisors;
    for (int32_t g = 1; g <= n; ++g) {
      if (n % g == 0) divisors.push_back(g);
    }
    const int32_t g = divisors[std::uniform_int_distribution<size_t>(0, divisors.size() - 1)(rng)];
    const int32_t k = n / g;
    INFO("iteration " << iter << " N=" << n << " G=" << g);
    const auto groups = basp::plan::place_groups(in, g);
    require_well_formed(groups, n, g);
    REQUIRE(basp::plan::place_groups(in, g) == groups);  // deterministic
    // Each node holds at least floor(c/K) groups entirely, each domain floor(n_d/K).
    std::map<uint64_t, int32_t> node_count, domain_count, whole_node, whole_domain;
    auto domain_key = [](const RankPlace& p) { return p.domain != 0 ? p.domain : (1ull << 63) | p.node; };
    for (const auto& p : in.ranks) {
      node_count[p.node]++;
      domain_count[domain_key(p)]++;
    }
    for (const auto& members : groups) {
      std::set<uint64_t> ns, ds;
      for (int32_t r : members) {
        ns.insert(in.ranks[static_cast<size_t>(r)].node);
        ds.insert(domain_key(in.ranks[static_cast<size_t>(r)]));
      }
      if (ns.size() == 1) whole_node[*ns.begin()]++;
      if (ds.size() == 1) whole_domain[*ds.begin()]++;
    }
    for (const auto& [node, c] : node_count) REQUIRE(whole_node[node] >= c / k);
    for (const auto& [domain, c] : domain_count) REQUIRE(whole_domain[domain] >= c / k);
  }
}

TEST_CASE("inside a node the strongest NVLink pairs form the groups", "[placement]") {
  PlacementInput in;
  for (int32_t r = 0; r < 4; ++r) in.ranks.push_back(RankPlace{7, 0, r});
  in.nodes[7] = links_from(4, {{{0, 2}, 50000}, {{1, 3}, 50000}, {{0, 1}, 25000}, {{2, 3}, 25000}});
  REQUIRE(basp::plan::place_groups(in, 2) == std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}});
  // A rank's GPU index is what counts, not its rank: swap the GPUs of ranks 1 and 2.
  std::swap(in.ranks[1].gpu, in.ranks[2].gpu);
  REQUIRE(basp::plan::place_groups(in, 2) == std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}});
}

TEST_CASE("NVL72-like domain: groups of two whole trays; two domains: one group crosses", "[placement]") {
  NodeLinks tray;
  tray.num_gpus = 4;
  tray.bandwidth.assign(16, 900000);
  tray.locality.assign(16, basp::plan::kLocalityNumaNode);
  for (bool cyclic : {false, true}) {
    for (int domains : {1, 2}) {
      PlacementInput in;
      in.ranks.resize(72);
      for (int32_t node = 0; node < 18; ++node) {
        in.nodes[static_cast<uint64_t>(node + 1)] = tray;
        for (int32_t gpu = 0; gpu < 4; ++gpu) {
          const int32_t rank = cyclic ? gpu * 18 + node : node * 4 + gpu;
          const uint64_t domain = domains == 1 ? 0xabc : (node < 9 ? 0xabc : 0xdef);
          in.ranks[static_cast<size_t>(rank)] = RankPlace{static_cast<uint64_t>(node + 1), domain, gpu};
        }
      }
      INFO("cyclic=" << cyclic << " domains=" << domains);
      const auto groups = basp::plan::place_groups(in, 9);
      require_well_formed(groups, 72, 9);
      int crossing = 0;
      for (const auto& members : groups) {
        std::map<uint64_t, int> per_node;
        std::set<uint64_t> ds;
        for (int32_t r : members) {
          per_node[in.ranks[static_cast<size_t>(r)].node]++;
          ds.insert(in.ranks[static_cast<size_t>(r)].domain);
        }
        REQUIRE(per_node.size() == 2);  // as few nodes as K = 8 allows with 4 GPUs per node
        for (const auto& [node, c] : per_node) REQUIRE(c == 4);
        crossing += ds.size() > 1 ? 1 : 0;
      }
      // 36 ranks per domain = 4 groups + 4 ranks: exactly one group must join the two domains' leftovers.
      REQUIRE(crossing == (domains == 1 ? 0 : 1));
    }
  }
}

TEST_CASE("65,536 ranks on 8-GPU nodes numbered round-robin: every group inside one node", "[placement]") {
  // DGX-1-like nodes: K = 4 must pick the two fully connected quads of each node.
  const NodeLinks dgx1 = links_from(8, {{{0, 3}, 50000},
                                        {{0, 4}, 50000},
                                        {{1, 2}, 50000},
                                        {{1, 5}, 50000},
                                        {{2, 3}, 50000},
                                        {{4, 7}, 50000},
                                        {{5, 6}, 50000},
                                        {{6, 7}, 50000},
                                        {{0, 1}, 25000},
                                        {{0, 2}, 25000},
                                        {{1, 3}, 25000},
                                        {{2, 6}, 25000},
                                        {{3, 7}, 25000},
                                        {{4, 5}, 25000},
                                        {{4, 6}, 25000},
                                        {{5, 7}, 25000}});
  constexpr int32_t kNodes = 8192;
  PlacementInput in;
  in.ranks.resize(kNodes * 8);
  for (int32_t node = 0; node < kNodes; ++node) {
    in.nodes[static_cast<uint64_t>(node) + 1] = dgx1;
    for (int32_t gpu = 0; gpu < 8; ++gpu) {
      in.ranks[static_cast<size_t>(gpu * kNodes + node)] = RankPlace{static_cast<uint64_t>(node) + 1, 0, gpu};
    }
  }
  const auto groups = basp::plan::place_groups(in, kNodes * 2);
  require_well_formed(groups, kNodes * 8, kNodes * 2);
  for (const auto& members : groups) {
    std::set<int32_t> gpus;
    for (int32_t r : members) {
      REQUIRE(in.ranks[static_cast<size_t>(r)].node == in.ranks[static_cast<size_t>(members[0])].node);
      gpus.insert(in.ranks[static_cast<size_t>(r)].gpu);
    }
    REQUIRE((gpus == std::set<int32_t>{0, 1, 2, 3} || gpus == std::set<int32_t>{4, 5, 6, 7}));
  }
}

TEST_CASE("exhaustive node partition reaches the brute-force optimum", "[placement]") {
  std::mt19937 rng(42);
  const std::vector<std::vector<int32_t>> shapes = {{2, 2, 2}, {3, 3},       {2, 2, 2, 2}, {4, 4},   {4, 2, 2},
                                                    {3, 2, 1}, {1, 1, 2, 4}, {5, 2},       {3, 3, 2}};
  for (int iter = 0; iter < 60; ++iter) {
    const auto& sizes = shapes[static_cast<size_t>(iter) % shapes.size()];
    const int32_t m = std::accumulate(sizes.begin(), sizes.end(), 0);
    const PartitionProblem p = random_problem(rng, m, sizes);
    basp::plan::PartitionMethod method{};
    const auto part_of = basp::plan::partition_node(p, &method);
    INFO("iteration " << iter);
    REQUIRE(method == basp::plan::PartitionMethod::kExhaustive);
    REQUIRE(basp::plan::score_partition(p, part_of) == brute_force_best(p));
    // The heuristic is valid and never claims better than the optimum.
    const auto h = basp::plan::partition_node_heuristic(p);
    REQUIRE(!(basp::plan::score_partition(p, part_of) < basp::plan::score_partition(p, h)));
  }
}

TEST_CASE("nodes beyond the exhaustive limit: the heuristic finds hidden cliques", "[placement]") {
  // 32 GPUs in 4 cliques of 8 (NVLink inside a clique only), clique of element e = (e * 5) % 4: interleaved.
  PartitionProblem p;
  p.size = 32;
  p.part_sizes = {8, 8, 8, 8};
  p.bandwidth.assign(32 * 32, 0);
  p.locality.assign(32 * 32, 0);
  for (int32_t a = 0; a < 32; ++a) {
    for (int32_t b = 0; b < 32; ++b) {
      if (a != b && (a * 5) % 4 == (b * 5) % 4) p.bandwidth[static_cast<size_t>(a * 32 + b)] = 300000;
    }
  }
  basp::plan::PartitionMethod method{};
  const auto part_of = basp::plan::partition_node(p, &method);
  REQUIRE(method == basp::plan::PartitionMethod::kHeuristic);
  REQUIRE(basp::plan::score_partition(p, part_of).min_bandwidth == 300000);
}

TEST_CASE("placement rejects inconsistent input, naming the value", "[placement]") {
  PlacementInput in = nodes_only({0, 0, 0, 0, 1, 1});
  REQUIRE_THROWS_WITH(basp::plan::place_groups(in, 4), Catch::Contains("num_groups (4)"));
  in.ranks[2].gpu = 5;
  in.nodes[1] = links_from(2, {});
  REQUIRE_THROWS_WITH(basp::plan::place_groups(in, 2), Catch::Contains("rank 2 has GPU index 5"));
  PartitionProblem p;
  p.size = 3;
  p.bandwidth.assign(9, 0);
  p.locality.assign(9, 0);
  p.part_sizes = {2, 2};
  REQUIRE_THROWS_WITH(basp::plan::partition_node(p), Catch::Contains("part sizes sum to 4"));
}
