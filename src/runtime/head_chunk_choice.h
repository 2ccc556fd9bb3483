// basp_choose_head_chunks: the head chunk choice of plan/head_chunk_choice.h for a layer of two plans of one comm,
// its inputs gathered from the plans and their comm, so that every rank of the group computes the same answer.
//
//   model    the comm's cost model (Comm::cost_model(): the same on every rank once calibrated or imported);
//   unit     the traffic of one per-peer byte of the plans' group: a plain plan's group exchanges beside the
//            comm's other groups, so membership_traffic over the comm's layout with one byte per peer in every
//            group; a batch plan's membership is not kept with the plan, so the batch planner's placement-free
//            estimate, estimate_traffic(K, 1), on the comm's machine;
//   tokens   num_tokens checked as an execute of the scatter plan checks it (-1: the plan's seq_len; a THD batch
//            plan's: its group's stream), then checked against the gather plan.
#pragma once

#include <cstdint>
#include <exception>

#include "plan/head_chunk_choice.h"
#include "plan/traffic.h"
#include "runtime/plan.h"

namespace basp::runtime {

// The choice, and the attention seconds it used (collective: the maximum over the ranks).
struct LayerHeadChunks {
  plan::HeadChunkChoice choice;
  double attention_seconds = 0.0;
};

// Not collective unless `collective`: then attention_seconds is first replaced by its maximum over the plans'
// group (a plain plan) or over the comm's world (a batch plan), whose every rank must call it, and a rank whose own
// checks failed (`local_error`: the caller's own, of the arguments it reads) still takes part so that the others
// fail at once; then it throws its own error. Throws INVALID_ARGUMENT naming the value: plans
// of different comms, a plain plan with a batch plan, plans whose group sizes or maximum head chunk counts differ,
// num_tokens neither plan takes, attention_seconds negative or not finite; collective: the ranks whose own checks
// failed, or BASP_ERROR_MISMATCH naming the ranks' token counts when they differ.
LayerHeadChunks choose_head_chunks(const Plan& scatter, const Plan& gather, int64_t num_tokens,
                                   double attention_seconds, bool collective, const std::exception_ptr& local_error);

// The traffic of one per-peer byte of `plan`'s group (see above).
plan::GroupTraffic unit_traffic(const Plan& plan);

}  // namespace basp::runtime
