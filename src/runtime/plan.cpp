#include "runtime/plan.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fnv.h"
#include "common/log.h"
#include "common/status_name.h"
#include "layout/sum_rows.h"
#include "plan/dtype.h"
#include "plan/head_chunks.h"
#include "runtime/pointer_check.h"

namespace basp::runtime {
namespace {

// BASP_DEBUG=INFO: what plan creation chose (docs/debugging.md).
void log_plan(const void* plan, const char* call, int64_t id, const plan::ExchangePlan& x,
              const transport::PlanExecutor& executor) {
  BASP_LOG(INFO, call, ": plan ", plan, " (id ", id, "): ", x.num_tensors(), " tensor(s), group size ", x.group_size,
           ", ", x.local_sequences, " local sequence(s), path ", detail::path_name(executor.plan_path()),
           ", workspace ", executor.workspace_bytes(), " bytes, ", x.bytes_sent, " bytes sent per exchange",
           x.replicated ? ", replicated heads" : "");
}

}  // namespace

Plan::Plan(std::shared_ptr<Comm> comm, const basp_plan_desc_v1* desc, const std::exception_ptr& local_error)
    : comm_(std::move(comm)) {
  comm_->check_usable();
  const auto& groups = comm_->layout();
  // Local checks first, but every rank joins the consistency check whatever they found.
  std::exception_ptr error = local_error;
  std::optional<plan::ExchangeSpec> spec;
  if (!error) {
    try {
      BASP_CHECK_ARG(!comm_->options().batch_only(),
                     "the comm serves batch plans only (micro_batch 0): use basp_batch_plan_create");
      spec = plan::validate_spec(*desc);
      check_pointers_ = pointer_checks_enabled();
    } catch (const detail::Error&) {
      error = std::current_exception();
    }
  }
  comm_->agree(describe_plan_create(desc, status_of(error), groups, comm_->options().placement), error);
  exchange_ = plan::make_exchange_plan(*spec, groups.group_size, comm_->position(), groups.sequences_per_group());
  transport::PlanContext context;
  context.plan_id = comm_->next_plan_id();
  context.call = "basp_plan_create";
  std::exception_ptr unmade;
  try {
    executor_ = comm_->collective([&] { return comm_->transport().make_executor(exchange_, context); });
  } catch (const detail::Error& e) {
    if (breaks_comm(e.status())) throw;
    unmade = std::current_exception();  // out of memory for its workspace, say: the others must not go on alone
  }
  comm_->collective([&] { confirm_made(unmade); });
  log_plan(this, "basp_plan_create", context.plan_id, exchange_, *executor_);
}

Plan::Plan(std::shared_ptr<Comm> comm, plan::ExchangePlan exchange, std::unique_ptr<transport::PlanExecutor> executor,
           int64_t batch_tokens, uint64_t documents)
    : comm_(std::move(comm)),
      exchange_(std::move(exchange)),
      executor_(std::move(executor)),
      check_pointers_(pointer_checks_enabled()),
      batch_(true),
      batch_tokens_(batch_tokens) {
  if (exchange_.spec.thd()) {
    documents_tokens_ = batch_tokens;
    executor_->set_documents(documents);
  }
  log_plan(this, "basp_batch_plan_create", -1, exchange_, *executor_);
}

// The last step of plan creation: one all-gather of whether every rank made its executor. Without it a rank that
// ran out of memory for its workspace would fail alone, and its peers' exchanges would wait for it.
void Plan::confirm_made(const std::exception_ptr& unmade) {
  struct Made {
    int32_t status = BASP_SUCCESS;
    char reason[220] = {};
  } mine;
  if (unmade) {
    mine.status = status_of(unmade);
    try {
      std::rethrow_exception(unmade);
    } catch (const detail::Error& e) {
      std::strncpy(mine.reason, e.what(), sizeof(mine.reason) - 1);
    }
  }
  transport::Bootstrap& group = comm_->transport().group();
  const std::vector<Made> all = transport::allgather_records(group, mine, "the confirmation round of basp_plan_create",
                                                             detail::Deadline(comm_->options().timeout_ms));
  if (unmade) std::rethrow_exception(unmade);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].status == BASP_SUCCESS) continue;
    std::string reason(all[r].reason, strnlen(all[r].reason, sizeof(all[r].reason)));
    detail::fail(static_cast<basp_status_t>(all[r].status), "world rank ", group.members()[r], " of ", group.where(),
                 " could not make its part of the plan (", detail::status_name(all[r].status), ": ", reason, ")");
  }
}

int64_t Plan::call_tokens(Direction direction, int64_t tokens) const {
  const plan::ExchangeSpec& spec = exchange_.spec;
  const char* op = direction_name(direction);
  if (spec.thd() && batch_) {
    BASP_CHECK_ARG(tokens == kPlanTokens || tokens == -1 || tokens == batch_tokens_, op, ": num_tokens (", tokens,
                   ") must be -1 or the stream of the batch plan's group (", batch_tokens_, ")");
    return batch_tokens_;
  }
  if (spec.thd()) {
    BASP_CHECK_ARG(tokens != kPlanTokens, op, ": a THD plan takes the token count of each call: use basp_", op,
                   "_tokens");
    BASP_CHECK_ARG(tokens >= 0 && tokens <= spec.seq_len, op, ": num_tokens (", tokens,
                   ") is outside 0..token_capacity (", spec.seq_len, ")");
    return tokens;
  }
  BASP_CHECK_ARG(tokens == kPlanTokens || tokens == -1 || tokens == spec.seq_len, op, ": num_tokens (", tokens,
                 ") must be -1 or the plan's seq_len (", spec.seq_len, ") for a ",
                 spec.layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", " plan");
  return spec.seq_len;
}

void Plan::check_documents(Direction direction, int64_t call) const {
  BASP_CHECK_ARG(documents_tokens_ < 0 || call == documents_tokens_, direction_name(direction), ": num_tokens (", call,
                 ") is not the stream's length in the document boundaries set (", documents_tokens_,
                 "): call basp_plan_set_documents for this step's documents");
}

void Plan::set_documents(const int64_t* cu_seqlens, int32_t num_docs) {
  check_usable();
  BASP_CHECK_ARG(exchange_.spec.thd(), "the plan's layout (", exchange_.spec.layout,
                 ") is not BASP_LAYOUT_THD: only packed plans have document boundaries");
  BASP_CHECK_ARG(num_docs >= 0, "num_docs (", num_docs, ") must not be negative");
  if (num_docs == 0 && cu_seqlens == nullptr) {
    documents_tokens_ = -1;
    executor_->set_documents(0);
    return;
  }
  BASP_CHECK(cu_seqlens != nullptr, BASP_ERROR_NULL_POINTER, "cu_seqlens is NULL with num_docs (", num_docs, ")");
  BASP_CHECK_ARG(cu_seqlens[0] == 0, "cu_seqlens[0] (", cu_seqlens[0], ") must be 0");
  for (int32_t i = 1; i <= num_docs; ++i) {
    BASP_CHECK_ARG(cu_seqlens[i] >= cu_seqlens[i - 1], "cu_seqlens[", i, "] (", cu_seqlens[i],
                   ") is less than cu_seqlens[", i - 1, "] (", cu_seqlens[i - 1], ")");
  }
  BASP_CHECK_ARG(cu_seqlens[num_docs] <= exchange_.spec.seq_len, "cu_seqlens[", num_docs, "] (", cu_seqlens[num_docs],
                 "), the stream's tokens, exceeds the plan's token_capacity (", exchange_.spec.seq_len, ")");
  documents_tokens_ = cu_seqlens[num_docs];
  executor_->set_documents(documents_fingerprint(cu_seqlens, num_docs));
}

uint64_t documents_fingerprint(const int64_t* cu_seqlens, int32_t num_docs) {
  detail::Fnv1a fp;  // over the entries: the same on every rank for the same boundaries
  for (int32_t i = 0; i <= num_docs; ++i) fp.add(cu_seqlens[i]);
  return fp.value() == 0 ? 1 : fp.value();
}

void Plan::check_buffers(Direction direction, const plan::CallGeometry& call, const void* const* inputs,
                         void* const* outputs, void* stream) {
  const char* op = direction_name(direction);
  BASP_CHECK(inputs != nullptr, BASP_ERROR_NULL_POINTER, "inputs is NULL");
  BASP_CHECK(outputs != nullptr, BASP_ERROR_NULL_POINTER, "outputs is NULL");
  const int32_t n = exchange_.num_tensors();
  const bool scatter = direction == Direction::kScatter;
  // Bytes of tensor t on this rank: its sequence-sharded and head-sharded sides.
  auto in_bytes = [&](int32_t t) { return call.input_bytes(direction, t); };
  auto out_bytes = [&](int32_t t) { return call.output_bytes(direction, t); };
  // A tensor of no bytes on this rank (no heads or no tokens here) may be NULL.
  for (int32_t t = 0; t < n; ++t) {
    BASP_CHECK(inputs[t] != nullptr || in_bytes(t) == 0, BASP_ERROR_NULL_POINTER, "inputs[", t, "] is NULL (",
               in_bytes(t), " bytes on this rank)");
    BASP_CHECK(outputs[t] != nullptr || out_bytes(t) == 0, BASP_ERROR_NULL_POINTER, "outputs[", t, "] is NULL (",
               out_bytes(t), " bytes on this rank)");
  }
  const transport::ExecuteNeeds& needs = executor_->needs();
  BASP_CHECK_ARG(needs.stream || stream == nullptr, "stream (", stream, ") must be NULL on the ", needs.backend,
                 " backend");
  // An output may overlap no input and no other output.
  auto overlap = [](const void* a, const void* b, int64_t na, int64_t nb) {
    auto pa = reinterpret_cast<uintptr_t>(a);
    auto pb = reinterpret_cast<uintptr_t>(b);
    return na > 0 && nb > 0 && pa < pb + static_cast<uintptr_t>(nb) && pb < pa + static_cast<uintptr_t>(na);
  };
  for (int32_t t = 0; t < n; ++t) {
    const int64_t nt = out_bytes(t);
    for (int32_t u = 0; u < n; ++u) {
      BASP_CHECK_ARG(!overlap(outputs[t], inputs[u], nt, in_bytes(u)), op, ": outputs[", t, "] (", outputs[t],
                     ") overlaps inputs[", u, "] (", inputs[u], ")");
      BASP_CHECK_ARG(u == t || !overlap(outputs[t], outputs[u], nt, out_bytes(u)), op, ": outputs[", t, "] (",
                     outputs[t], ") overlaps outputs[", u, "] (", outputs[u], ")");
    }
  }
  if (!scatter && exchange_.replicated && !layout::summable(exchange_.spec.dtype)) {
    detail::fail(BASP_ERROR_UNSUPPORTED, op, ": the plan has heads several ranks hold, whose gather sums them, and ",
                 "dtype ", plan::dtype_name(exchange_.spec.dtype),
                 " cannot be summed (FP16, BF16, FP32 and FP64 can); scatter works for every dtype");
  }
  if (check_pointers_) check_memory_kinds(direction, inputs, outputs);
}

// Memory the backend cannot reach: device memory on MPI (when the build knows CUDA), host memory on NCCL. Asked
// once per new set of pointers: training loops pass the same buffers step after step, and the query is a driver
// call per pointer. An address keeps its kind while it is allocated, and a freed range is reused only by an
// allocation of the same kind (host and device ranges are disjoint in CUDA's unified address space).
void Plan::check_memory_kinds(Direction direction, const void* const* inputs, void* const* outputs) {
  const char* op = direction_name(direction);
  const int32_t n = exchange_.num_tensors();
  bool same = checked_valid_;
  for (int32_t t = 0; t < n && same; ++t) {
    same = checked_[static_cast<size_t>(t)] == inputs[t] && checked_[static_cast<size_t>(n + t)] == outputs[t];
  }
  if (same) return;
  checked_valid_ = false;
  const transport::ExecuteNeeds& needs = executor_->needs();
  for (int32_t t = 0; t < n; ++t) {
    if (inputs[t] != nullptr) check_memory_kind(needs, op, "inputs", t, inputs[t]);
    if (outputs[t] != nullptr) check_memory_kind(needs, op, "outputs", t, outputs[t]);
  }
  for (int32_t t = 0; t < n; ++t) {
    checked_[static_cast<size_t>(t)] = inputs[t];
    checked_[static_cast<size_t>(n + t)] = outputs[t];
  }
  checked_valid_ = true;
}

// A rank whose arguments fail the checks still tells its group (transport::PlanExecutor::fail), so that the peers
// fail at once instead of waiting for it until their timeout; then it throws its own error.
void Plan::execute(Direction direction, int64_t tokens, plan::HeadChunk chunk, const void* const* inputs,
                   void* const* outputs, void* stream) {
  check_usable();
  const char* op = direction_name(direction);
  int64_t call = tokens;
  plan::CallGeometry geometry;  // derived once, for the checks and the transport
  try {
    call = call_tokens(direction, tokens);
    check_documents(direction, call);
    exchange_.call(call, chunk, direction, geometry);
    check_buffers(direction, geometry, inputs, outputs, stream);
    check_no_chunks(direction);
  } catch (const detail::Error&) {
    const std::exception_ptr own = std::current_exception();
    in_order([&] { executor_->fail(direction, call, chunk, own); });
  }
  in_order([&] { executor_->execute(direction, geometry, inputs, outputs, stream); });
  BASP_LOG(TRACE, op, ": plan ", static_cast<const void*>(this), ", ", call, " tokens, path ",
           detail::path_name(executor_->last_path()), ", ", executor_->last_control_rounds(), " control round(s)");
}

basp_plan_info_v1 Plan::info() const {
  const auto& x = exchange_;
  basp_plan_info_v1 out = BASP_PLAN_INFO_INITIALIZER;
  out.num_tensors = x.num_tensors();
  out.group_size = x.group_size;
  out.local_sequences = x.local_sequences;
  out.workspace_bytes = executor_->workspace_bytes();
  out.bytes_sent_per_exchange = x.bytes_sent;
  out.last_path = executor_->last_path();
  out.layout = x.spec.layout;
  for (int32_t t = 0; t < x.num_tensors(); ++t) {
    // A THD batch plan moves its group's stream: its shapes are those of the stream, not of the capacity.
    const layout::Geometry g = batch_ && x.spec.thd() ? x.at(t, batch_tokens_) : x.tensors[static_cast<size_t>(t)];
    out.ndim = g.ndim();
    out.seq_sharded_elems[t] = g.seq_tensor_bytes(g.me) / x.spec.elem_size;
    out.head_sharded_elems[t] = g.head_tensor_bytes(g.me) / x.spec.elem_size;
    g.seq_sharded_shape(out.seq_sharded_shape[t]);
    g.head_sharded_shape(out.head_sharded_shape[t]);
    out.head_begin[t] = g.head_begin(g.me);
    out.head_end[t] = g.head_end(g.me);
    out.split_begin[t] = g.split_begin(g.me);
    out.split_end[t] = g.split_begin(g.me + 1);
    out.token_begin = g.tok_begin(g.me);
    out.token_end = g.tok_begin(g.me + 1);
    out.local_tokens = g.tok_count(g.me);
  }
  out.token_capacity = x.spec.thd() ? x.spec.seq_len : 0;
  out.replicated = x.replicated ? 1 : 0;
  out.plan_path = executor_->plan_path();
  out.max_head_chunks = plan::max_head_chunks(x);
  return out;
}

}  // namespace basp::runtime
