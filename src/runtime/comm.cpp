#include "runtime/comm.h"

#include <cstring>
#include <utility>

#include "common/error.h"
#include "plan/placement.h"

namespace basp::runtime {

Comm::Comm(plan::GroupLayout layout, int32_t rank, CommOptions options,
           std::unique_ptr<transport::GroupTransport> transport)
    : layout_(std::move(layout)), rank_(rank), options_(options), transport_(std::move(transport)) {}

void Comm::agree(const CallRecord& mine, const std::exception_ptr& local_error) {
  collective([&] { runtime::agree(transport_->group(), mine, local_error, detail::Deadline(options_.timeout_ms)); });
}

basp_rank_info_v1 Comm::rank_info(int32_t rank, int64_t seq_len) const {
  const int32_t who = rank == -1 ? rank_ : rank;
  BASP_CHECK_ARG(who >= 0 && who < layout_.world_size, "rank (", rank, ") is outside 0..", layout_.world_size - 1,
                 " (or -1 for the calling rank)");
  const plan::RankInfo r = plan::describe_rank(layout_, who, seq_len);
  basp_rank_info_v1 out = BASP_RANK_INFO_INITIALIZER;
  out.world_size = layout_.world_size;
  out.rank = who;
  out.num_groups = layout_.num_groups;
  out.group_size = layout_.group_size;
  out.group_index = r.group_index;
  out.group_position = r.group_position;
  out.micro_batch = layout_.micro_batch;
  out.first_sequence = r.first_sequence;
  out.num_sequences = r.num_sequences;
  out.seq_len = seq_len;
  out.token_begin = r.token_begin;
  out.token_end = r.token_end;
  return out;
}

void Comm::group_ranks(int32_t group_index, int32_t* ranks, int32_t capacity) const {
  BASP_CHECK_ARG(group_index >= 0 && group_index < layout_.num_groups, "group_index (", group_index, ") is outside 0..",
                 layout_.num_groups - 1);
  BASP_CHECK(ranks != nullptr, BASP_ERROR_NULL_POINTER, "ranks is NULL");
  BASP_CHECK_ARG(capacity >= layout_.group_size, "capacity (", capacity, ") is smaller than the group size (",
                 layout_.group_size, ")");
  const auto& members = layout_.members[static_cast<size_t>(group_index)];
  std::memcpy(ranks, members.data(), members.size() * sizeof(int32_t));
}

plan::DocumentAssignment Comm::assign_documents(const int64_t* lengths, int32_t num_docs, int64_t capacity,
                                                int32_t rank) const {
  const int32_t who = rank == -1 ? rank_ : rank;
  BASP_CHECK_ARG(who >= 0 && who < layout_.world_size, "rank (", rank, ") is outside 0..", layout_.world_size - 1,
                 " (or -1 for the calling rank)");
  return plan::assign_documents(layout_, lengths, num_docs, capacity, who);
}

void* Comm::mem_alloc(size_t bytes, const std::exception_ptr& local_error) {
  check_usable();
  std::exception_ptr error = local_error;
  if (!error) {
    try {
      BASP_CHECK_ARG(bytes > 0 && bytes <= (size_t{1} << 48), "bytes (", bytes, ") must be in 1..2^48");
    } catch (const detail::Error&) {
      error = std::current_exception();
    }
  }
  agree(describe_call(CallKind::kMemAlloc, status_of(error)), error);
  return collective([&] { return transport_->alloc_shared(bytes); });
}

void Comm::mem_free(void* ptr) {
  check_usable();
  // NULL on every rank does nothing; NULL on some ranks only is a mismatch the check names.
  agree(describe_mem_free(ptr == nullptr), nullptr);
  if (ptr == nullptr) return;
  collective([&] { transport_->free_shared(ptr); });
}

basp_status_t Comm::async_error(std::string& message) {
  // A broken comm reports what broke it (the one call that does not fail with BASP_ERROR_COMM_BROKEN then).
  const basp_status_t broken = health_.cause(message);
  if (broken != BASP_SUCCESS) return broken;
  const basp_status_t found = transport_->async_error(message);
  // An asynchronous failure leaves the backend unusable (NCCL requires an abort): later calls fail at once.
  if (found != BASP_SUCCESS) health_.mark_broken(found, message);
  return found;
}

void Comm::abort() {
  BASP_CHECK(transport_->abortable(), BASP_ERROR_UNSUPPORTED,
             "this backend cannot abort a communicator (only BASP_BACKEND_NCCL can)");
  // Broken first: even when the backend's abort itself fails, its communicators are given up and later calls must
  // not reach them.
  health_.mark_broken(BASP_ERROR_NCCL, "the comm was aborted (basp_comm_abort)");
  transport_->abort();
}

plan::GroupLayout plan_groups(int32_t world_size, const CommOptions& options,
                              const std::vector<topology::RankLocality>& locality) {
  const int64_t micro_batch = options.layout_micro_batch(world_size);
  const int32_t groups = plan::resolve_num_groups(world_size, micro_batch, options.num_groups);
  switch (options.placement) {
    case BASP_PLACEMENT_CONTIGUOUS:
      return plan::make_layout(world_size, micro_batch, plan::contiguous_members(world_size, groups));
    case BASP_PLACEMENT_DEFAULT:
    case BASP_PLACEMENT_TOPOLOGY:
      if (locality.empty()) {
        return plan::make_layout(world_size, micro_batch, plan::contiguous_members(world_size, groups));
      }
      BASP_CHECK(locality.size() == static_cast<size_t>(world_size), BASP_ERROR_INTERNAL, "placement got ",
                 locality.size(), " locality records for ", world_size, " ranks");
      return plan::make_layout(world_size, micro_batch,
                               plan::place_groups(topology::placement_input(locality), groups));
    default: break;
  }
  detail::fail(BASP_ERROR_INVALID_ARGUMENT, "placement (", static_cast<int>(options.placement),
               ") is not a basp_placement_t value");
}

transport::BatchTransport& Comm::batch_transport(const char* call) {
  check_usable();
  BASP_CHECK_ARG(options_.batch_capacity > 0, call,
                 ": the comm was made without batch plans (config->batch_capacity 0): create it with "
                 "batch_capacity > 0, the most sequence-side tokens a rank holds in one batch plan");
  transport::BatchTransport* batch = transport_->batch();
  BASP_CHECK(batch != nullptr, BASP_ERROR_UNSUPPORTED, call, ": this backend (", static_cast<int>(backend()),
             ") has no batch plans");
  return *batch;
}

plan::CostModel Comm::cost_model() const {
  std::lock_guard<std::mutex> lock(model_mutex_);
  return model_;
}

void Comm::set_cost_model(const plan::CostModel& model) {
  std::lock_guard<std::mutex> lock(model_mutex_);
  model_ = model;
}

Comm::OpenGather Comm::open_batch_gather() const {
  std::lock_guard<std::mutex> lock(open_gather_mutex_);
  return open_gather_;
}

void Comm::set_open_batch_gather(OpenGather open) {
  std::lock_guard<std::mutex> lock(open_gather_mutex_);
  open_gather_ = open;
}

transport::GroupSpec group_spec(const plan::GroupLayout& layout, int32_t rank, int64_t timeout_ms) {
  const int32_t index = layout.group_of[static_cast<size_t>(rank)];
  return transport::make_group_spec(index, layout.position_of[static_cast<size_t>(rank)],
                                    layout.members[static_cast<size_t>(index)], plan::describe_group(layout, index),
                                    layout.world_size, timeout_ms);
}

}  // namespace basp::runtime
