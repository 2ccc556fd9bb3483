#include "plan/placement.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "common/error.h"
#include "plan/node_partition.h"

namespace basp::plan {

uint32_t NodeLinks::bandwidth_between(int32_t a, int32_t b) const {
  if (a < 0 || b < 0 || a >= num_gpus || b >= num_gpus || a == b) return 0;
  return bandwidth[static_cast<size_t>(a) * static_cast<size_t>(num_gpus) + static_cast<size_t>(b)];
}

uint8_t NodeLinks::locality_between(int32_t a, int32_t b) const {
  if (a < 0 || b < 0 || a >= num_gpus || b >= num_gpus || a == b) return kLocalitySystem;
  return locality[static_cast<size_t>(a) * static_cast<size_t>(num_gpus) + static_cast<size_t>(b)];
}

namespace {

// The partition problem of one share: its links the weaker direction of each pair's (an all-to-all loads both).
PartitionProblem share_problem(const PlacementInput& in, const NodeShare& share) {
  PartitionProblem p;
  p.size = static_cast<int32_t>(share.ranks.size());
  const auto m = static_cast<size_t>(p.size);
  p.bandwidth.assign(m * m, 0);
  p.locality.assign(m * m, kLocalitySystem);
  auto it = in.nodes.find(share.node);
  if (it != in.nodes.end()) {
    const NodeLinks& links = it->second;
    for (size_t a = 0; a < m; ++a) {
      const int32_t ga = in.ranks[static_cast<size_t>(share.ranks[a])].gpu;
      for (size_t b = 0; b < m; ++b) {
        const int32_t gb = in.ranks[static_cast<size_t>(share.ranks[b])].gpu;
        // Both directions must carry the traffic of an all-to-all: the weaker one counts.
        p.bandwidth[a * m + b] = std::min(links.bandwidth_between(ga, gb), links.bandwidth_between(gb, ga));
        p.locality[a * m + b] = std::min(links.locality_between(ga, gb), links.locality_between(gb, ga));
      }
    }
  }
  for (const auto& part : share.parts) p.part_sizes.push_back(part.first);
  return p;
}

std::string cache_key(const PartitionProblem& p) {
  std::string key;
  auto append = [&key](const void* data, size_t bytes) { key.append(static_cast<const char*>(data), bytes); };
  append(&p.size, sizeof(p.size));
  append(p.part_sizes.data(), p.part_sizes.size() * sizeof(int32_t));
  append(p.bandwidth.data(), p.bandwidth.size() * sizeof(uint32_t));
  append(p.locality.data(), p.locality.size());
  return key;
}

}  // namespace

std::vector<std::vector<int32_t>> members_of_shares(const PlacementInput& in, const std::vector<NodeShare>& shares,
                                                    size_t num_groups) {
  std::vector<std::vector<int32_t>> members(num_groups);
  std::unordered_map<std::string, std::vector<int32_t>> solved;
  for (const NodeShare& share : shares) {
    const PartitionProblem problem = share_problem(in, share);
    std::string key = cache_key(problem);
    auto it = solved.find(key);
    if (it == solved.end()) it = solved.emplace(std::move(key), partition_node(problem)).first;
    const std::vector<int32_t>& part_of = it->second;
    for (size_t e = 0; e < share.ranks.size(); ++e) {
      const int32_t group = share.parts[static_cast<size_t>(part_of[e])].second;
      members[static_cast<size_t>(group)].push_back(share.ranks[e]);
    }
  }
  for (auto& m : members) std::sort(m.begin(), m.end());
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return members;
}

namespace {

// A share of one unit (the ranks of one node inside one domain) that goes into one group.
struct Part {
  int32_t unit;
  int32_t count;
};

// Ranks that should stay together while packing: one unit's remainder, or a whole domain's remainder.
struct Piece {
  std::vector<Part> parts;
  int32_t size = 0;
};

using Unit = NodeShare;  // parts in group creation order

// Takes `need` ranks out of a piece being split: a part that fits exactly, else the largest that fits, else a
// slice of the smallest larger part, so that the fewest nodes are cut.
std::vector<Part> take_from(std::vector<Part>& parts, int32_t need) {
  std::vector<Part> out;
  while (need > 0) {
    int exact = -1;
    int smaller = -1;  // the largest part below need, first of equals
    for (size_t i = 0; i < parts.size(); ++i) {
      const int32_t c = parts[i].count;
      if (c == need && exact < 0) exact = static_cast<int>(i);
      if (c < need && (smaller < 0 || c > parts[static_cast<size_t>(smaller)].count)) smaller = static_cast<int>(i);
    }
    const int whole = exact >= 0 ? exact : smaller;
    if (whole >= 0) {
      const Part p = parts[static_cast<size_t>(whole)];
      out.push_back(p);
      need -= p.count;
      parts.erase(parts.begin() + whole);
      continue;
    }
    size_t smallest = 0;
    for (size_t j = 1; j < parts.size(); ++j) {
      if (parts[j].count < parts[smallest].count) smallest = j;
    }
    out.push_back({parts[smallest].unit, need});
    parts[smallest].count -= need;
    need = 0;
  }
  return out;
}

// Packs pieces (each smaller than k) into full groups of k appended to `groups`. Each group starts with the largest
// piece and is completed by exact fits, then the largest piece that fits, and only when none fits by splitting
// the smallest larger piece. Ties go to the earlier piece. Pieces that do not fill a last group go to `leftover`.
void pack(std::vector<Piece> pieces, int32_t k, std::vector<std::vector<Part>>& groups, std::vector<Part>& leftover) {
  std::map<int32_t, std::deque<size_t>> by_size;
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    by_size[pieces[i].size].push_back(i);
    total += pieces[i].size;
  }
  auto pop = [&](std::map<int32_t, std::deque<size_t>>::iterator it) {
    const size_t idx = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) by_size.erase(it);
    return idx;
  };
  while (total >= k) {
    std::vector<Part> group;
    int32_t need = k;
    while (need > 0) {
      auto it = by_size.find(need);
      bool split = false;
      if (it == by_size.end()) {
        auto larger = by_size.lower_bound(need);
        if (larger != by_size.begin()) {
          it = std::prev(larger);
        } else {
          it = larger;
          split = true;
        }
      }
      const size_t idx = pop(it);
      Piece& piece = pieces[idx];
      if (!split) {
        group.insert(group.end(), piece.parts.begin(), piece.parts.end());
        need -= piece.size;
        piece.parts.clear();
        piece.size = 0;
      } else {
        std::vector<Part> taken = take_from(piece.parts, need);
        group.insert(group.end(), taken.begin(), taken.end());
        piece.size -= need;
        need = 0;
        by_size[piece.size].push_front(idx);  // its rest completes the next group first
      }
    }
    total -= k;
    groups.push_back(std::move(group));
  }
  for (const Piece& piece : pieces) leftover.insert(leftover.end(), piece.parts.begin(), piece.parts.end());
}

void check_input(const PlacementInput& in) {
  for (const auto& [key, links] : in.nodes) {
    const auto n = static_cast<size_t>(std::max(links.num_gpus, 0));
    BASP_CHECK_ARG(links.num_gpus >= 0, "node ", key, " has a negative GPU count (", links.num_gpus, ")");
    BASP_CHECK_ARG(links.bandwidth.size() == n * n && links.locality.size() == n * n, "node ", key,
                   " has link matrices of ", links.bandwidth.size(), " and ", links.locality.size(), " entries for ", n,
                   " GPUs");
  }
  for (size_t r = 0; r < in.ranks.size(); ++r) {
    const RankPlace& p = in.ranks[r];
    BASP_CHECK_ARG(p.gpu >= -1, "rank ", r, " has GPU index ", p.gpu, " (expected -1 or a local index)");
    auto it = in.nodes.find(p.node);
    if (it != in.nodes.end()) {
      BASP_CHECK_ARG(p.gpu < it->second.num_gpus, "rank ", r, " has GPU index ", p.gpu, " but its node lists ",
                     it->second.num_gpus, " GPUs");
    }
  }
}

struct PairHash {
  size_t operator()(const std::pair<int32_t, uint64_t>& k) const {
    return std::hash<uint64_t>()(k.second * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(k.first));
  }
};

}  // namespace

std::vector<std::vector<int32_t>> place_groups(const PlacementInput& input, int32_t num_groups) {
  const auto n = static_cast<int32_t>(input.ranks.size());
  BASP_CHECK_ARG(n > 0, "placement needs at least one rank");
  BASP_CHECK_ARG(num_groups > 0 && n % num_groups == 0, "num_groups (", num_groups,
                 ") does not divide the world size (", n, ")");
  check_input(input);
  const int32_t k = n / num_groups;

  // Domains and units (node inside domain), numbered in order of their lowest rank.
  std::unordered_map<uint64_t, int32_t> fabric_domain;  // NVLink fabric key -> domain
  std::unordered_map<uint64_t, int32_t> node_domain;    // node key -> domain, for nodes without a fabric
  std::unordered_map<std::pair<int32_t, uint64_t>, int32_t, PairHash> unit_of;
  std::vector<std::vector<int32_t>> domain_units;
  std::vector<Unit> units;
  for (int32_t r = 0; r < n; ++r) {
    const RankPlace& p = input.ranks[static_cast<size_t>(r)];
    auto& table = p.domain != 0 ? fabric_domain : node_domain;
    const uint64_t key = p.domain != 0 ? p.domain : p.node;
    auto d = table.emplace(key, static_cast<int32_t>(domain_units.size()));
    if (d.second) domain_units.emplace_back();
    const int32_t domain = d.first->second;
    auto u = unit_of.emplace(std::make_pair(domain, p.node), static_cast<int32_t>(units.size()));
    if (u.second) {
      units.emplace_back();
      units.back().node = p.node;
      domain_units[static_cast<size_t>(domain)].push_back(u.first->second);
    }
    units[static_cast<size_t>(u.first->second)].ranks.push_back(r);
  }

  // Counting: whole-unit groups, then each domain's leftovers, then the leftovers of all domains.
  std::vector<std::vector<Part>> groups;
  std::vector<Piece> domain_rests;
  for (const auto& members : domain_units) {
    std::vector<Piece> pieces;
    for (int32_t u : members) {
      const auto c = static_cast<int32_t>(units[static_cast<size_t>(u)].ranks.size());
      for (int32_t q = 0; q < c / k; ++q) groups.push_back({Part{u, k}});
      if (c % k != 0) pieces.push_back(Piece{{Part{u, c % k}}, c % k});
    }
    Piece rest;
    pack(std::move(pieces), k, groups, rest.parts);
    for (const Part& part : rest.parts) rest.size += part.count;
    if (rest.size > 0) domain_rests.push_back(std::move(rest));
  }
  std::vector<Part> unplaced;
  pack(std::move(domain_rests), k, groups, unplaced);
  BASP_CHECK(unplaced.empty() && static_cast<int32_t>(groups.size()) == num_groups, BASP_ERROR_INTERNAL,
             "placement formed ", groups.size(), " groups for ", num_groups, " with ", unplaced.size(),
             " parts unplaced");
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Part& part : groups[g]) {
      units[static_cast<size_t>(part.unit)].parts.emplace_back(part.count, static_cast<int32_t>(g));
    }
  }

  // Inside each unit: which ranks form which part. Identical nodes are solved once.
  return members_of_shares(input, units, groups.size());
}

}  // namespace basp::plan
