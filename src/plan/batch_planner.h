// The batch planner (docs/batch.md): groups of any size for one packed micro-batch, from a cost model of the
// machine. Pure arithmetic, no I/O: every rank computes the same plan from the same input.
//
// Input: the lengths of the documents of the global micro-batch, the attention shape (Hq, Hkv, D, Dv, element size),
// the machine (plan::PlacementInput: every rank's node, NVLink domain, GPU), the token capacity of one rank and a
// cost model. Output: a partition of the N ranks into groups of any sizes (1..N, not only powers of two), placed
// by the mixed-size placement (placement.h's rules), every document assigned to one group, and the predicted
// step time. With equal lengths, B dividing N and a capacity of B*S/N it returns BASP's gcd groups.
//
// The objective (predict_batch, and the planner's own evaluation: one function). A group of K ranks whose stream
// holds T tokens (its documents' lengths L) costs scatter + attention + gather (cost_model.h), with t = ceil(T/K),
// hq = ceil(Hq/K) and hkv = max(1, ceil(Hkv/K)) the busiest rank's rows and heads (a KV head is replicated on the
// wire when K > Hkv), D the query and key head size and Dv the value head size (D unless the problem sets one:
// multi-head latent attention's v and output heads are smaller than its q and k heads). Each exchanged tensor
// counts its heads times its head size:
//   bytes one rank exchanges with one peer:  scatter  t * (hq * D + hkv * D + hkv * Dv) * elem_size   (Q, K, V)
//                                            gather   t * hq * Dv * elem_size   (the output has V's head size)
//   node_bytes     per peer * (the most members of the group in one unit - 1), a unit being a rank's NVLink
//                  domain when it has one (domain != 0), else its node (traffic.h: calibration counts the same);
//   network_bytes  per node: the sum over every group of per peer * (each of its members on that node) * (that
//                  member's peers outside its unit); a group pays the largest such sum over the nodes where it
//                  has cross-unit traffic (groups sharing a node share its link);
//   attention      attention_seconds(sum L^2, sum L, hq / Hq) * (D + Dv) / (2 D);  K = 1: no exchange, share 1.
//                  The model's c2 and c1 are the seconds of all Hq heads on one rank with Dv = D; attention's work
//                  grows with D + Dv (Q K^T reads D per head, P V reads Dv), so a smaller Dv scales it down, and
//                  Dv = D leaves it exactly as the model gives it.
// The step's time is the max over groups. A group of K holds at most K * capacity tokens (position l holds
// split_count(T, K, l) <= ceil(T/K)).
//
// The planner (batch_planner.cpp; the mixed plan in mixed_plan.cpp, the objective in batch_model.cpp) compares the best
// plan of one group size for every K dividing N (documents by plan::group_documents, members by place_groups) with a
// mixed plan (every long document in a group of its own size, the short ones packed onto single ranks, sizes set by a
// bisection on the target time with a placement-free estimate) and, for N <= 32, plans of G nearly equal groups for
// every G not dividing N, all evaluated exactly after placement, and returns the lowest (ties: the uniform plan of the
// smallest K). Cost: O(divisors(N) * (M log M + N log N) + M * sqrt(Hq) * 60) for M documents.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/cost_model.h"
#include "plan/placement.h"

namespace basp::plan {

struct BatchProblem {
  std::vector<int64_t> lengths;  // the documents' tokens, > 0 each
  int64_t query_heads = 0;       // Hq > 0
  int64_t kv_heads = 0;          // Hkv > 0, dividing Hq
  int64_t head_dim = 0;          // D > 0: the query and key head size
  int64_t v_head_dim = 0;        // Dv: the value (and output) head size, 0 = head_dim
  int64_t elem_size = 0;         // bytes per element > 0
  int64_t capacity = 0;          // most tokens one rank holds on the sequence side (> 0)
  PlacementInput machine;        // ranks.size() == N
  CostModel model;
};

// One group of a BatchPartition.
struct BatchGroup {
  std::vector<int32_t> members;  // world ranks by position
  std::vector<int32_t> docs;     // document indices, ascending: the order of the group's stream
  int64_t tokens = 0;            // the stream's T
  double predicted_seconds = 0;  // scatter + attention + gather of this group
};

// The planner's answer: the ranks partitioned into groups and the documents among them. Not a batch plan (a
// runtime::Plan made from such a partition, which executes the exchanges).
struct BatchPartition {
  std::vector<BatchGroup> groups;    // ordered by their lowest member rank
  std::vector<int32_t> group_of;     // [N] group of each rank
  std::vector<int32_t> position_of;  // [N]
  std::vector<int32_t> doc_group;    // [num docs] group of each document
  double predicted_seconds = 0;      // the max over groups
};

// Throws INVALID_ARGUMENT naming the argument and value: no rank, a length <= 0, a document longer than
// N * capacity, a batch of more than N * capacity tokens (no partition can hold it), a bad shape (v_head_dim
// negative, or bytes per token, (Hq * D + Hkv * (D + Dv)) * elem_size, beyond int64).
BatchPartition plan_batch(const BatchProblem& problem);

// The predicted time of a given membership and assignment (the planner's objective), for benchmarks and tests:
// `members` partitions the ranks, `docs[g]` the documents of group g.
double predict_batch(const BatchProblem& problem, const std::vector<std::vector<int32_t>>& members,
                     const std::vector<std::vector<int32_t>>& docs);

// Mixed-size placement: groups of the given sizes (summing to N), placed by placement.h's rules (inside an NVLink
// domain when the group fits, as few nodes as possible, the strongest NVLink partition inside a node), ordered by
// their lowest rank, members ascending. Deterministic. Throws naming a size <= 0 or a sum != N.
std::vector<std::vector<int32_t>> place_mixed_groups(const PlacementInput& input, const std::vector<int32_t>& sizes);

}  // namespace basp::plan
