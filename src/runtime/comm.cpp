#include "runtime/comm.h"

#include <optional>
#include <utility>

#include "common/error.h"
#include "plan/placement.h"
#include "transport/memory_kind.h"

namespace basp::runtime {

Comm::Comm(plan::GroupLayout layout, int32_t rank, basp_placement_t placement,
           std::unique_ptr<transport::GroupTransport> transport)
    : layout_(std::move(layout)), rank_(rank), placement_(placement), transport_(std::move(transport)) {}

plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options,
                              const std::vector<topology::RankLocality>& locality) {
  const int32_t groups = plan::resolve_num_groups(world_size, options.micro_batch, options.num_groups);
  switch (options.placement) {
    case BASP_PLACEMENT_CONTIGUOUS:
      return plan::make_layout(world_size, options.micro_batch, plan::contiguous_members(world_size, groups));
    case BASP_PLACEMENT_DEFAULT:
    case BASP_PLACEMENT_TOPOLOGY:
      if (locality.empty()) {
        return plan::make_layout(world_size, options.micro_batch, plan::contiguous_members(world_size, groups));
      }
      BASP_CHECK(locality.size() == static_cast<size_t>(world_size), BASP_ERROR_INTERNAL, "placement got ",
                 locality.size(), " locality records for ", world_size, " ranks");
      return plan::make_layout(world_size, options.micro_batch,
                               plan::place_groups(topology::placement_input(locality), groups));
    default: break;
  }
  detail::fail(BASP_ERROR_INVALID_ARGUMENT, "placement (", static_cast<int>(options.placement),
               ") is not a basp_placement_t value");
}

plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options) {
  return plan_groups(world_size, options, {});
}

void Comm::agree(const CallRecord& mine, const std::exception_ptr& local_error) {
  try {
    collective([&] { transport_->agree(mine); });
  } catch (const detail::Error& e) {
    if (!local_error || e.status() != BASP_ERROR_MISMATCH) throw;
    // This rank's own error explains the mismatch best; say what the other ranks see.
    try {
      std::rethrow_exception(local_error);
    } catch (const detail::Error& own) {
      detail::fail(own.status(), own.what(), " (the other ranks of the call fail with BASP_ERROR_MISMATCH: ", e.what(),
                   ")");
    }
  }
  if (local_error) std::rethrow_exception(local_error);
}

Plan::Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1& desc) : Plan(std::move(comm), &desc, nullptr) {}

Plan::Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1* desc, std::exception_ptr local_error)
    : comm_(std::move(comm)) {
  comm_->check_usable();
  const auto& groups = comm_->layout();
  // Local checks first, but every rank joins the consistency check whatever they found.
  basp_status_t local_status = BASP_SUCCESS;
  std::optional<plan::ExchangeSpec> spec;
  try {
    if (local_error) std::rethrow_exception(local_error);
    spec = plan::validate_spec(*desc, groups.group_size);
  } catch (const detail::Error& e) {
    local_error = std::current_exception();
    local_status = e.status();
  }
  comm_->agree(describe_plan_create(desc, local_status, groups, comm_->placement()), local_error);
  exchange_ = plan::make_exchange_plan(*spec, groups.group_size, comm_->position(), groups.sequences_per_group());
  comm_->collective([&] { executor_ = comm_->transport().make_executor(exchange_); });
}

void Plan::check_buffers(const char* op, const void* const* inputs, void* const* outputs, void* stream) const {
  BASP_CHECK(inputs != nullptr, BASP_ERROR_NULL_POINTER, "inputs is NULL");
  BASP_CHECK(outputs != nullptr, BASP_ERROR_NULL_POINTER, "outputs is NULL");
  const int32_t n = exchange_.num_tensors();
  for (int32_t t = 0; t < n; ++t) {
    BASP_CHECK(inputs[t] != nullptr, BASP_ERROR_NULL_POINTER, "inputs[", t, "] is NULL");
    BASP_CHECK(outputs[t] != nullptr, BASP_ERROR_NULL_POINTER, "outputs[", t, "] is NULL");
  }
  if (comm_->transport().backend() == BASP_BACKEND_MPI) {
    BASP_CHECK_ARG(stream == nullptr, "stream (", stream, ") must be NULL on the MPI backend");
  }
  // Memory the backend cannot reach: device memory on MPI (when the build knows CUDA), host memory on NCCL.
  const basp_backend_t backend = comm_->transport().backend();
  for (int32_t t = 0; t < n; ++t) {
    transport::check_memory_kind(backend, op, "inputs", t, inputs[t]);
    transport::check_memory_kind(backend, op, "outputs", t, outputs[t]);
  }
  // Every buffer holds tensor_bytes; an output may overlap no input and no other output.
  auto overlap = [](const void* a, const void* b, int64_t na, int64_t nb) {
    auto pa = reinterpret_cast<uintptr_t>(a);
    auto pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(nb) && pb < pa + static_cast<uintptr_t>(na);
  };
  for (int32_t t = 0; t < n; ++t) {
    const int64_t nt = exchange_.tensors[t].tensor_bytes();
    for (int32_t u = 0; u < n; ++u) {
      const int64_t nu = exchange_.tensors[u].tensor_bytes();
      BASP_CHECK_ARG(!overlap(outputs[t], inputs[u], nt, nu), op, ": outputs[", t, "] (", outputs[t],
                     ") overlaps inputs[", u, "] (", inputs[u], ")");
      BASP_CHECK_ARG(u == t || !overlap(outputs[t], outputs[u], nt, nu), op, ": outputs[", t, "] (", outputs[t],
                     ") overlaps outputs[", u, "] (", outputs[u], ")");
    }
  }
}

void Plan::scatter(const void* const* inputs, void* const* outputs, void* stream) {
  comm_->check_usable();
  check_buffers("scatter", inputs, outputs, stream);
  comm_->collective([&] { executor_->scatter(inputs, outputs, stream); });
}

void Plan::gather(const void* const* inputs, void* const* outputs, void* stream) {
  comm_->check_usable();
  check_buffers("gather", inputs, outputs, stream);
  comm_->collective([&] { executor_->gather(inputs, outputs, stream); });
}

}  // namespace basp::runtime
