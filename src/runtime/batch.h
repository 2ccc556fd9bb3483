// Batch plans (docs/batch.md): a membership of groups of any size for one micro-batch, checked, and the plan of
// this rank's group in it, made locally over the comm-wide resources of batch plans (transport::BatchTransport).
//
// Ranks here are world ranks, as in basp.h: the ranks 0..N-1 of the parent the comm was made over, all of which a
// batch comm holds (N: comm_size). The errors name the fields of basp_batch_v1 (batch->ranks[i], ...), which the
// request's fields mirror: that is what a caller of the C ABI wrote.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "plan/batch_planner.h"
#include "plan/exchange.h"
#include "runtime/comm.h"

namespace basp::runtime {

class Plan;

// One group of a requested batch.
struct RequestedGroup {
  std::vector<int32_t> members;  // world ranks, by position
  int64_t sequences = 0;         // BSHD/SBHD: the sequences of the plan's seq_len the group holds
  std::vector<int32_t> docs;     // THD: the group's documents (indices into BatchRequest::lengths), in stream order
};

// What a batch plan is made from, as the caller gives it: checked by check_batch.
struct BatchRequest {
  // The plan's tensors (plan::validate_batch_tensors). BSHD/SBHD: seq_len is every sequence's length; THD: 0 (each
  // group's plan is sized at its own stream).
  plan::ExchangeSpec tensors;
  int64_t token_capacity = 0;  // THD: the most tokens a group's stream may hold, 0: no limit but the comm's
  std::vector<RequestedGroup> groups;
  std::vector<int64_t> lengths;  // THD: the tokens of every document of the micro-batch, by index
  bool check_capacity = true;    // false: the comm's batch_capacity is not applied (calibration's own plans)
};

// A group's documents: their boundaries in its stream and their fingerprint (what basp_plan_set_documents would
// give the executor for the same boundaries).
struct GroupDocuments {
  std::vector<int64_t> cu_seqlens{0};  // [docs + 1]
  uint64_t fingerprint = 0;
  int64_t tokens() const { return cu_seqlens.back(); }
};

// A batch after check_batch: identical on every rank that was given the same request.
struct CheckedBatch {
  std::vector<std::vector<int32_t>> members;  // [G] world ranks by position
  std::vector<int32_t> group_of;              // [N] each rank's group
  std::vector<int32_t> position_of;           // [N] each rank's position in its group
  std::vector<int64_t> counts;                // [G] sequences (BSHD/SBHD) or stream tokens T (THD)
  std::vector<GroupDocuments> documents;      // THD: [G]
  uint64_t fingerprint = 0;                   // of the tensors and everything above
};

// Checks `request` for a comm of `comm_size` ranks; the error names the field and the value: a membership that is
// not a partition of 0..N-1, a group's counts, a document, a rank's sequence-side tokens over `capacity` (<= 0: not
// checked), a THD stream over the request's token_capacity.
CheckedBatch check_batch(const BatchRequest& request, int32_t comm_size, int64_t capacity);

// Not collective: this rank's plan in the batch (a Plan like any other for the C ABI).
std::shared_ptr<Plan> make_batch_plan(const std::shared_ptr<Comm>& comm, const BatchRequest& request);

// The planner's problem on this comm: `problem` (its documents, heads and element size) on the comm's machine with
// its cost model; capacity 0 is the comm's batch_capacity.
plan::BatchProblem batch_problem(const Comm& comm, plan::BatchProblem problem);

}  // namespace basp::runtime
