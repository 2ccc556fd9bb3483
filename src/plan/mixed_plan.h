// The batch planner's mixed plan (batch_planner.h): every long document in a group of its own size, the short ones
// packed onto single ranks. Internal to the plan component: not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/batch_model.h"

namespace basp::plan::batch_internal {

// The mixed plan: every document alone in a group of its own size, or packed with others on single ranks.
//
// For a target time tau a document takes the smallest K, among K_min = ceil(L / capacity) and the smallest K of
// each query-head share ceil(Hq / K) above it, whose estimate is within tau; the documents that take K = 1 are
// packed onto single ranks, at least max(their tokens / capacity, their attention / tau) of them. The smallest tau
// whose ranks fit in N (bisection: the count only falls as tau grows) sets the sizes; the short documents are then
// shared out over every rank left (longest first, each to the least loaded rank that holds it), and the ranks
// still left grow the slowest groups while that lowers their estimate. Returns false when the sizes at any tau
// exceed N (long documents that must share a group) or the packing overflows a rank. `budget` is fill_bins's,
// taken from the caller's; sizes_out and docs_out are set only when it returns true.
bool mixed_plan(const BatchProblem& p, const UnitMap& m, bool use_slack, int64_t& budget,
                std::vector<int32_t>& sizes_out, Lists& docs_out);

}  // namespace basp::plan::batch_internal
