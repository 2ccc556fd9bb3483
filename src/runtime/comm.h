// The objects behind the C handles: a Comm (this rank's groups and its transport) and a Plan (one exchange,
// with its executor). Plans hold their Comm by shared_ptr, so destroying a comm handle before its plans is safe.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "basp/basp.h"
#include "plan/exchange.h"
#include "plan/groups.h"
#include "runtime/consistency.h"
#include "topology/rank_locality.h"
#include "transport/transport.h"

namespace basp::runtime {

struct CommOptions {
  int64_t micro_batch = 0;
  int32_t num_groups = -1;
  basp_backend_t backend = BASP_BACKEND_MPI;
  basp_placement_t placement = BASP_PLACEMENT_DEFAULT;
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;  // resolved (runtime/timeout.h); 0: no timeout
};

class Comm {
 public:
  Comm(plan::GroupLayout layout, int32_t rank, basp_placement_t placement,
       std::unique_ptr<transport::GroupTransport> transport);

  const plan::GroupLayout& layout() const { return layout_; }
  int32_t rank() const { return rank_; }
  int32_t group_index() const { return layout_.group_of[rank_]; }
  int32_t position() const { return layout_.position_of[rank_]; }
  basp_placement_t placement() const { return placement_; }
  transport::GroupTransport& transport() { return *transport_; }

  // Throws BASP_ERROR_COMM_BROKEN once a collective step of the comm failed (transport/health.h).
  void check_usable() const { transport_->health().check(); }
  // Runs `step`, a collective step of the comm; a failure that leaves the group out of step (timeout, MPI
  // error) marks the comm broken before it propagates.
  template <typename Step>
  void collective(Step&& step) {
    try {
      step();
    } catch (const detail::Error& e) {
      if (transport::breaks_comm(e.status())) transport_->health().mark_broken(e.status(), e.what());
      throw;
    }
  }
  // The consistency check of a collective call (runtime/consistency.h). A rank whose own argument checks
  // failed (`local_error`) takes part too, so that the others fail at once instead of waiting for it, and then
  // reports its own error.
  void agree(const CallRecord& mine, const std::exception_ptr& local_error);

 private:
  plan::GroupLayout layout_;
  int32_t rank_;
  basp_placement_t placement_;
  std::unique_ptr<transport::GroupTransport> transport_;
};

class Plan {
 public:
  // Collective over the rank's group.
  Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1& desc);
  // The same, for the C ABI: `desc` is NULL and `local_error` set when the caller's descriptor could not be read;
  // the rank still joins the group's consistency check (Comm::agree), then throws.
  Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1* desc, std::exception_ptr local_error);

  const plan::ExchangePlan& exchange() const { return exchange_; }
  const Comm& comm() const { return *comm_; }
  void scatter(const void* const* inputs, void* const* outputs, void* stream);
  void gather(const void* const* inputs, void* const* outputs, void* stream);
  int64_t workspace_bytes() const { return executor_->workspace_bytes(); }
  int32_t last_path() const { return executor_->last_path(); }

 private:
  void check_buffers(const char* op, const void* const* inputs, void* const* outputs, void* stream) const;

  std::shared_ptr<Comm> comm_;
  plan::ExchangePlan exchange_;
  std::unique_ptr<transport::PlanExecutor> executor_;
};

// Options -> the validated group layout for `world_size` ranks (placement applied). `locality` holds every rank's
// record (topology/rank_locality.h), gathered over the parent communicator, for TOPOLOGY (and DEFAULT)
// placement; empty means nothing is known and those fall back to the contiguous rule. Every rank must pass the
// same records to get the same layout.
plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options,
                              const std::vector<topology::RankLocality>& locality);
plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options);

}  // namespace basp::runtime
