// The traffic model of dynamic groups (cost_model.h's node and network bytes), the one definition the batch
// planner, its placement-free estimate and calibration share: pure arithmetic, no I/O.
//
// A rank's locality unit is its NVLink domain when it has one (RankPlace::domain != 0), else its node. In one
// exchange every member of a group of K ranks sends each other member `per_peer` bytes (the busiest rank's: the
// model charges every member as much), and
//   node_bytes     per_peer * (the most members of the group in one unit - 1);
//   network_bytes  per physical node: the sum over every group of per_peer * (each of its members on that node) *
//                  (that member's peers outside its unit); a group pays the largest such sum over the nodes where
//                  it has a member with a peer outside its unit (groups sharing a node share its link).
// A group of one rank moves nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/placement.h"

namespace basp::plan {

// The machine as the traffic model sees it, as dense ids in order of the lowest rank: each rank's locality unit
// and its physical node (whose network link carries the traffic that leaves the unit).
struct UnitMap {
  int32_t n = 0;
  std::vector<int32_t> unit_of;
  std::vector<int32_t> node_of;
  int32_t num_units = 0;
  int32_t num_nodes = 0;
  int32_t unit_ranks = 1;  // the most common unit size (ties: the larger), for the placement-free estimate
  int32_t node_ranks = 1;  // the same for physical nodes

  bool same_unit(int32_t a, int32_t b) const {
    return unit_of[static_cast<size_t>(a)] == unit_of[static_cast<size_t>(b)];
  }
};

UnitMap make_unit_map(const PlacementInput& machine);

// One exchange's bytes of one group, as cost_model.h counts them.
struct GroupTraffic {
  double node_bytes = 0;
  double network_bytes = 0;
};

// The traffic of every group of a membership exchanging at once: `members` partitions ranks of `m` (world ranks
// by position), `per_peer[g]` the bytes each member of group g sends each other member.
std::vector<GroupTraffic> membership_traffic(const UnitMap& m, const std::vector<std::vector<int32_t>>& members,
                                             const std::vector<double>& per_peer);

// The placement-free estimate of a group of k ranks: it spans units of m.unit_ranks ranks whole (its ranks' other
// peers are outside their unit) and is alone on its nodes' links, min(k, m.node_ranks) of its members on each.
GroupTraffic estimate_traffic(const UnitMap& m, int32_t k, double per_peer);

}  // namespace basp::plan
