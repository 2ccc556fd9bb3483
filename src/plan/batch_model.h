// The batch planner's time model of a group (batch_planner.h's objective, its bytes by traffic.h), shared by the
// planners in batch_planner.cpp and mixed_plan.cpp. Internal to the plan component: not part of the public API.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "plan/batch_planner.h"
#include "plan/traffic.h"

namespace basp::plan::batch_internal {

using Lists = std::vector<std::vector<int32_t>>;

inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }  // a >= 0, b > 0

// a * b for a, b > 0, saturating at INT64_MAX.
inline int64_t saturating_mul(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() / b ? std::numeric_limits<int64_t>::max() : a * b;
}

// The value head size Dv: v_head_dim, or head_dim when it is 0.
inline int64_t value_dim(const BatchProblem& p) { return p.v_head_dim == 0 ? p.head_dim : p.v_head_dim; }

// The byte model of batch_planner.h: bytes one rank exchanges with one peer (Q, K at D and V at Dv; the output at
// Dv), and the busiest rank's query share.
double scatter_per_peer(const BatchProblem& p, int32_t k, int64_t tokens);
double gather_per_peer(const BatchProblem& p, int32_t k, int64_t tokens);
double share(const BatchProblem& p, int32_t k);

// The attention model of batch_planner.h: the cost model's attention_seconds scaled by (D + Dv) / (2 D), exactly
// the model's figure when Dv = D. Every attention time of the planner comes from here.
double attention_seconds(const BatchProblem& p, double sum_sq, double sum, double share);

// The attention work of a list of documents: its tokens, sum L^2 and sum L.
struct Work {
  int64_t tokens = 0;
  double sum_sq = 0;
  double sum = 0;
};

Work work_of(const BatchProblem& p, const std::vector<int32_t>& docs);

// The exact objective: each group's scatter + attention + gather with the given membership (see batch_planner.h),
// the exchanges' bytes by membership_traffic.
std::vector<double> group_times(const BatchProblem& p, const UnitMap& m, const Lists& members, const Lists& docs);

// The placement-free estimate the planner sizes groups with: the exchanges' bytes by estimate_traffic.
double estimate(const BatchProblem& p, const UnitMap& m, int32_t k, int64_t tokens, double sum_sq, double sum);

// The largest element of v, 0 when empty.
double max_of(const std::vector<double>& v);

// The document indices, longest first (ties: the lower index).
std::vector<int32_t> longest_first(const BatchProblem& p);

}  // namespace basp::plan::batch_internal
