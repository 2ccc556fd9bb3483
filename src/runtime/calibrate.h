// basp_comm_calibrate (docs/batch.md): the exchange cost model measured on the live comm, with groups running
// concurrently as batch plans, fitted (plan::fit_exchange) from timings every rank gathers, so that every rank
// stores the same model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "plan/cost_model.h"
#include "plan/placement.h"
#include "runtime/comm.h"

namespace basp::runtime {

// The memberships calibration measures on `machine`: groups of K = 2, 4, 8, ... (at most N), placed as the
// planner places them, the rest of the ranks alone; and, with several nodes, pairs across nodes.
std::vector<std::vector<std::vector<int32_t>>> calibration_memberships(const plan::PlacementInput& machine);

// One scatter of a group, `chunk(r, j)` the bytes position r sends position j: the sample's bytes as the cost model
// counts them (the busiest rank's bytes to its own node; the busiest node link's bytes, summed over every group of
// the membership that crosses it).
struct GroupTraffic {
  double node_bytes = 0;
  double network_bytes = 0;
};
std::vector<GroupTraffic> membership_traffic(const plan::PlacementInput& machine,
                                             const std::vector<std::vector<int32_t>>& members,
                                             const std::vector<std::vector<std::vector<double>>>& chunk);

// Collective over the comm's world. max_bytes: per rank and exchange (0: 4 MiB); repeats per size (0: 5).
void calibrate(const std::shared_ptr<Comm>& comm, int64_t max_bytes, int32_t repeats);

}  // namespace basp::runtime
