// Batch plans (docs/batch.md): a membership of groups of any size for one micro-batch, validated, and the plan of
// this rank's group in it, made locally over the comm's world-level resources (transport::BatchTransport).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "basp/basp.h"
#include "plan/batch_planner.h"
#include "plan/exchange.h"
#include "runtime/comm.h"

namespace basp::runtime {

class Plan;

// A batch description after validation: identical on every rank that was given the same input.
struct BatchDescription {
  std::vector<std::vector<int32_t>> members;      // [G] world ranks by position
  std::vector<int64_t> counts;                    // [G] sequences (BSHD/SBHD) or stream tokens T (THD)
  std::vector<std::vector<int64_t>> doc_lengths;  // THD: [G] the group's documents' lengths in stream order
  uint64_t fingerprint = 0;                       // of the spec and everything above
};

// Checks `batch` against the world and the spec; the error names the field and the value: a membership that is not
// a partition of 0..N-1, a group's counts, a document length, a rank's sequence-side tokens over `capacity`.
BatchDescription read_batch(const basp_batch_v1& batch, const plan::ExchangeSpec& spec, int32_t world_size,
                            int64_t capacity);

// Not collective: this rank's plan in the batch (a Plan like any other for the C ABI).
// `check_capacity` false: the comm's batch_capacity is not applied (calibration's own plans).
std::shared_ptr<Plan> make_batch_plan(const std::shared_ptr<Comm>& comm, const basp_plan_desc_v1& desc,
                                      const basp_batch_v1& batch, bool check_capacity = true);

// The planner's problem on this comm: its machine, its cost model, `capacity` (0: the comm's batch_capacity).
plan::BatchProblem batch_problem(const Comm& comm, const basp_batch_problem_v1& problem);

}  // namespace basp::runtime
