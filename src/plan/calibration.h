// The arithmetic of basp_comm_calibrate (runtime/calibrate.h runs the timings): which memberships it measures, the
// bytes each measured exchange moves by the traffic model the planner uses (traffic.h), and the samples and model
// fitted from every rank's timings. Pure arithmetic, no I/O.
#pragma once

#include <cstdint>
#include <vector>

#include "basp/basp.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/traffic.h"

namespace basp::plan {

// The calibration tensor: heads (split evenly for K dividing 64) of bytes per head and token.
constexpr int64_t kCalibrationHeads = 64;
constexpr int64_t kCalibrationHeadDim = 256;

// A partition of the ranks into groups, each group's world ranks by position.
using Membership = std::vector<std::vector<int32_t>>;

// The memberships calibration measures on `machine`: groups of K = 2, 4, 8, ... (at most N; and N itself when it
// is not a power of two), placed as the planner places them, the rest of the ranks alone; and, when the machine
// has several locality units (traffic.h), pairs across units: the ranks ordered by their unit, rank i with rank
// i + N/2 when their units differ.
std::vector<Membership> calibration_memberships(const PlacementInput& machine);

// The tokens per rank of each measured size for `max_bytes` per rank and exchange: max_bytes / 64, / 8 and
// max_bytes, at least one token each.
std::vector<int64_t> calibration_tokens(int64_t max_bytes);

// The size of the membership's largest group (1 at least).
int32_t largest_group(const Membership& members);

// One exchange of the calibration tensor of `seq` tokens by every group of the membership at once (each group
// holding the whole tensor): traffic.h's bytes, the busiest member's bytes to one peer being
// ceil(seq / K) * ceil(kCalibrationHeads / K) * kCalibrationHeadDim.
std::vector<GroupTraffic> calibration_traffic(const UnitMap& m, const Membership& members, int64_t seq);

// The head chunks of calibration's chunked measurement of a membership: 2, or 1 (one more whole exchange) where the
// busiest position holds one head (ceil(kCalibrationHeads / largest_group) == 1) or on NCCL (whose batch plans,
// which calibration measures, take no head chunks). Two chunks: the fewest that cut the rows' pieces, the
// cheapest to measure, and the per_piece they fit prices more chunks at least as high as they cost on the one
// machine measured (cost_model.h), so the choice errs towards fewer chunks.
int32_t calibration_chunks(const Membership& members, basp_backend_t backend);

// The row pieces a position of a group of k ranks copies to its peers in one whole exchange of the calibration
// tensor of `seq` tokens: the busiest position's rows, ceil(seq / k), times k - 1 (cost_model.h's pieces of a group
// that crosses no network link; a sample of one that does has pieces 0).
double calibration_pieces(int32_t k, int64_t seq);

// Per membership, the medians calibration measures: one whole exchange per size of `tokens`, then, where
// calibration_chunks(members, backend) >= 2, the largest size again in that many head chunks executed one after
// another (their summed time); where it is 1 there is no such measurement (it would only repeat the largest size).
size_t calibration_medians_per_membership(const std::vector<int64_t>& tokens, const Membership& members,
                                          basp_backend_t backend);

// One sample per group of two ranks or more and measurement, memberships outer (then the sizes, then the chunked
// one, as calibration_medians_per_membership counts them): its traffic at `tokens[s] * largest_group` tokens and
// its slowest rank's median, the chunked one with its chunks and pieces. `medians` holds every rank's `per_rank`
// medians, rank-major.
std::vector<CostSample> calibration_samples(const PlacementInput& machine, const std::vector<Membership>& memberships,
                                            const std::vector<int64_t>& tokens, basp_backend_t backend, size_t per_rank,
                                            const std::vector<double>& medians);

// fit_exchange over the samples from `base`, with source "calibrated" and the calibration's context (world size,
// nodes, a note naming the samples, repeats and bytes).
CostModel calibrated_model(const PlacementInput& machine, const std::vector<CostSample>& samples, const CostModel& base,
                           int32_t repeats, int64_t max_bytes);

}  // namespace basp::plan
