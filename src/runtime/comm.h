// The object behind a basp_comm_t: this rank's groups, its group transport and the comm's health. Plans hold
// their Comm by shared_ptr, so destroying a comm handle before its plans is safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "plan/cost_model.h"
#include "plan/documents.h"
#include "plan/groups.h"
#include "plan/placement.h"
#include "runtime/consistency.h"
#include "runtime/health.h"
#include "runtime/options.h"
#include "runtime/progress.h"
#include "topology/rank_locality.h"
#include "transport/transport.h"

namespace basp::runtime {

class Comm {
 public:
  Comm(plan::GroupLayout layout, int32_t rank, CommOptions options,
       std::unique_ptr<transport::GroupTransport> transport);

  const plan::GroupLayout& layout() const { return layout_; }
  int32_t rank() const { return rank_; }
  int32_t position() const { return layout_.position_of[static_cast<size_t>(rank_)]; }
  const CommOptions& options() const { return options_; }
  basp_backend_t backend() const { return transport_->backend(); }
  transport::GroupTransport& transport() { return *transport_; }

  // Throws BASP_ERROR_COMM_BROKEN once a collective step of the comm failed (runtime/health.h).
  void check_usable() const { health_.check(); }
  // Runs `step`, a collective step of the comm; a failure that leaves the group out of step (timeout, MPI or NCCL
  // error) marks the comm broken before it propagates.
  template <typename Step>
  auto collective(Step&& step) -> decltype(step()) {
    try {
      return step();
    } catch (const detail::Error& e) {
      if (breaks_comm(e.status())) health_.mark_broken(e.status(), e.what());
      throw;
    }
  }
  // The consistency check of a collective call over the group (runtime/consistency.h), local error included.
  void agree(const CallRecord& mine, const std::exception_ptr& local_error);
  // The plan id of the next plan: plans are created collectively, one at a time, so every rank of the group
  // counts alike.
  int64_t next_plan_id() { return next_plan_id_.fetch_add(1); }

  // The C ABI's operations on a comm.
  basp_rank_info_v1 rank_info(int32_t rank, int64_t seq_len) const;
  void group_ranks(int32_t group_index, int32_t* ranks, int32_t capacity) const;
  // The documents of a packed micro-batch over this comm's groups, seen from world rank `rank` (-1: the calling
  // rank): plan::assign_documents on layout(). Not collective.
  plan::DocumentAssignment assign_documents(const int64_t* lengths, int32_t num_docs, int64_t capacity,
                                            int32_t rank) const;
  // Collective over the group. `local_error`: the caller's argument failed (a NULL output pointer).
  void* mem_alloc(size_t bytes, const std::exception_ptr& local_error);
  void mem_free(void* ptr);
  // What broke the comm, else the backend's asynchronous error (which then breaks it), else BASP_SUCCESS.
  basp_status_t async_error(std::string& message);
  // Breaks the comm, then aborts its backend; a second abort does nothing.
  void abort();

  // Batch plans (docs/batch.md). Whether the comm serves them (made with batch_capacity > 0 on a backend that
  // has them), else throws naming what is missing; `call` names the caller's function.
  transport::BatchTransport& batch_transport(const char* call);
  // The id of the next batch plan: every rank makes every batch plan of the comm, in the same order, so every rank
  // counts alike; the count travels with each exchange, and a rank that skipped one gets MISMATCH.
  int64_t next_batch_id() { return next_batch_id_.fetch_add(1); }
  // Every rank's node, NVLink domain and GPU, gathered at creation: the planner's machine, and the traffic model's
  // of basp_choose_head_chunks.
  const plan::PlacementInput& machine() const { return machine_; }
  void set_machine(plan::PlacementInput machine) { machine_ = std::move(machine); }
  // The comm's cost model: the default until calibrated or imported. Any thread.
  plan::CostModel cost_model() const;
  void set_cost_model(const plan::CostModel& model);
  // The comm's progress thread (runtime/progress.h): split-phase chunks, and every execute while they are in flight.
  Progress& progress() { return progress_; }
  // The batch plan whose gather sums held heads and has a round of chunks open (plan nullptr: none), with the
  // round's chunks started and its count: its earlier contributions wait in the batch plans' gather workspace (the
  // pool has one per direction), so no other batch plan's gather may start meanwhile; scatters may.
  struct OpenGather {
    const void* plan = nullptr;
    int32_t started = 0;
    int32_t count = 0;
  };
  OpenGather open_batch_gather() const;
  void set_open_batch_gather(OpenGather open);

 private:
  plan::GroupLayout layout_;
  int32_t rank_;
  CommOptions options_;
  Health health_;
  std::unique_ptr<transport::GroupTransport> transport_;
  std::atomic<int64_t> next_plan_id_{0};
  std::atomic<int64_t> next_batch_id_{0};
  plan::PlacementInput machine_;
  mutable std::mutex model_mutex_;
  plan::CostModel model_ = plan::default_cost_model();
  mutable std::mutex open_gather_mutex_;
  OpenGather open_gather_;
  Progress progress_;  // last: its thread ends before the transport goes
};

// Options -> the validated group layout for `world_size` ranks (placement applied). `locality` holds every rank's
// record (topology/rank_locality.h), gathered over the parent, for TOPOLOGY (and DEFAULT) placement; empty means
// nothing is known and those fall back to the contiguous rule. Every rank must pass the same records to get the
// same layout.
plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options,
                              const std::vector<topology::RankLocality>& locality = {});

// Where this rank's group transport connects: its group of `layout`.
transport::GroupSpec group_spec(const plan::GroupLayout& layout, int32_t rank, int64_t timeout_ms);

}  // namespace basp::runtime
