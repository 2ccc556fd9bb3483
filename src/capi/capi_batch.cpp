// The C ABI of batch plans, the batch planner and the cost model (basp.h, "Batch plans"): marshalling only, as in
// capi.cpp. Every check runs before the first byte of output is written.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "plan/batch_planner.h"
#include "plan/cost_model.h"
#include "plan/dtype.h"
#include "plan/exchange.h"
#include "runtime/batch.h"
#include "runtime/calibrate.h"
#include "runtime/plan.h"

namespace {

using basp::capi::guarded;

constexpr basp_plan_desc_v1 kPlanDefaults = BASP_PLAN_DESC_INITIALIZER;
constexpr basp_batch_v1 kBatchDefaults = BASP_BATCH_INITIALIZER;
constexpr basp_batch_problem_v1 kProblemDefaults = BASP_BATCH_PROBLEM_INITIALIZER;
constexpr basp_cost_model_v1 kModelDefaults = BASP_COST_MODEL_INITIALIZER;
// The descriptor as batch plans first took it (through token_capacity): such callers get head_dims of 0.
constexpr size_t kBatchPlanDescFirstSize = offsetof(basp_plan_desc_v1, head_dims);
// The problem as the planner first took it (through capacity): such callers get v_head_dim 0 (head_dim).
constexpr size_t kProblemFirstSize = offsetof(basp_batch_problem_v1, v_head_dim);
// The model before per_piece (through reserved0): get writes such callers that much, set reads per_piece as 0.
constexpr size_t kModelFirstSize = offsetof(basp_cost_model_v1, per_piece);

// basp_batch_v1's arrays, read within the bounds their counts give (a group's ranks, its documents); the runtime
// checks what they say (runtime::check_batch).
void read_groups(const basp_batch_v1& b, bool thd, int32_t comm_size, basp::runtime::BatchRequest& out) {
  int64_t listed = 0;
  int64_t docs_listed = 0;
  for (int32_t g = 0; g < b.num_groups; ++g) {
    const int32_t k = b.group_sizes[g];
    BASP_CHECK_ARG(k >= 1 && listed + k <= comm_size, "batch->group_sizes[", g, "] (", k,
                   ") must be positive, and the sizes must sum to the comm's ", comm_size, " ranks");
    const int32_t n = b.group_docs[g];
    BASP_CHECK_ARG(n >= 0 && docs_listed + n <= b.num_docs, "batch->group_docs[", g, "] (", n,
                   ") must not be negative, and the counts must sum to num_docs (", b.num_docs, ")");
    basp::runtime::RequestedGroup group;
    group.members.assign(b.ranks + listed, b.ranks + listed + k);
    if (!thd) {
      group.sequences = n;
    } else if (b.docs != nullptr) {
      group.docs.assign(b.docs + docs_listed, b.docs + docs_listed + n);
    } else {
      for (int32_t i = 0; i < n; ++i) group.docs.push_back(static_cast<int32_t>(docs_listed + i));
    }
    listed += k;
    docs_listed += n;
    out.groups.push_back(std::move(group));
  }
  BASP_CHECK_ARG(docs_listed == b.num_docs, "batch->group_docs sum to ", docs_listed, ", not to num_docs (", b.num_docs,
                 ")");
}

// The C descriptions of a batch plan -> the runtime's request: converted once, checked for what reading needs.
basp::runtime::BatchRequest read_batch_request(const basp_plan_desc_v1& d, const basp_batch_v1& b, int32_t comm_size) {
  basp::runtime::BatchRequest out;
  out.tensors = basp::plan::validate_batch_tensors(d);
  out.token_capacity = d.token_capacity;
  const bool thd = out.tensors.thd();
  BASP_CHECK_ARG(b.num_groups >= 1 && b.num_groups <= comm_size, "batch->num_groups (", b.num_groups,
                 ") must be in 1..", comm_size, " (the comm's ranks)");
  BASP_CHECK_ARG(b.num_docs >= 0, "batch->num_docs (", b.num_docs, ") must not be negative");
  BASP_CHECK(b.group_sizes != nullptr, BASP_ERROR_NULL_POINTER, "batch->group_sizes is NULL");
  BASP_CHECK(b.ranks != nullptr, BASP_ERROR_NULL_POINTER, "batch->ranks is NULL");
  BASP_CHECK(b.group_docs != nullptr, BASP_ERROR_NULL_POINTER, "batch->group_docs is NULL");
  if (thd) {
    BASP_CHECK(b.lengths != nullptr || b.num_docs == 0, BASP_ERROR_NULL_POINTER,
               "batch->lengths is NULL with num_docs (", b.num_docs, ") for a THD plan");
    if (b.num_docs > 0) out.lengths.assign(b.lengths, b.lengths + b.num_docs);
  } else {
    BASP_CHECK_ARG(b.docs == nullptr && b.lengths == nullptr,
                   "batch->docs and batch->lengths must be NULL for a BSHD or SBHD plan (its sequences all have the "
                   "plan's seq_len)");
  }
  read_groups(b, thd, comm_size, out);
  return out;
}

// basp_batch_problem_v1 -> the planner's problem, without the comm's part (runtime::batch_problem adds it).
basp::plan::BatchProblem read_problem(const basp_batch_problem_v1& p) {
  BASP_CHECK_ARG(p.num_docs >= 1, "problem->num_docs (", p.num_docs, ") must be positive");
  BASP_CHECK(p.lengths != nullptr, BASP_ERROR_NULL_POINTER, "problem->lengths is NULL");
  BASP_CHECK_ARG(p.dtype != BASP_DTYPE_UNSET && basp::plan::dtype_size(p.dtype) > 0, "problem->dtype (", p.dtype,
                 ") is not a basp_dtype_t value");
  basp::plan::BatchProblem out;
  out.lengths.assign(p.lengths, p.lengths + p.num_docs);
  out.query_heads = p.query_heads;
  out.kv_heads = p.kv_heads;
  out.head_dim = p.head_dim;
  out.v_head_dim = p.v_head_dim;
  out.elem_size = basp::plan::dtype_size(p.dtype);
  out.capacity = p.capacity;
  return out;
}

// basp_comm_partition_batch, under the name the caller used (`call`).
basp_status_t partition_batch(const char* call, basp_comm_t comm, const basp_batch_problem_t* problem,
                              int32_t* group_sizes, int32_t* ranks, int32_t* group_docs, int32_t* docs,
                              basp_batch_t* out, double* predicted_seconds) {
  return guarded(call, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_batch_problem_v1 p = basp::capi::read_struct(problem, kProblemDefaults, BASP_BATCH_PROBLEM_MAGIC,
                                                            BASP_BATCH_PROBLEM_VERSION, "problem", kProblemFirstSize);
    BASP_CHECK(group_sizes != nullptr, BASP_ERROR_NULL_POINTER, "group_sizes is NULL");
    BASP_CHECK(ranks != nullptr, BASP_ERROR_NULL_POINTER, "ranks is NULL");
    BASP_CHECK(group_docs != nullptr, BASP_ERROR_NULL_POINTER, "group_docs is NULL");
    BASP_CHECK(docs != nullptr, BASP_ERROR_NULL_POINTER, "docs is NULL");
    basp::capi::check_out_struct(out, BASP_BATCH_MAGIC, sizeof(basp_batch_v1), "out");
    c->batch_transport(call);
    const basp::plan::BatchPartition result = basp::plan::plan_batch(basp::runtime::batch_problem(*c, read_problem(p)));
    int32_t r = 0;
    int32_t d = 0;
    for (size_t g = 0; g < result.groups.size(); ++g) {
      const auto& group = result.groups[g];
      group_sizes[g] = static_cast<int32_t>(group.members.size());
      group_docs[g] = static_cast<int32_t>(group.docs.size());
      for (int32_t m : group.members) ranks[r++] = m;
      for (int32_t doc : group.docs) docs[d++] = doc;
    }
    basp_batch_v1 b = BASP_BATCH_INITIALIZER;
    b.num_groups = static_cast<int32_t>(result.groups.size());
    b.num_docs = p.num_docs;
    b.group_sizes = group_sizes;
    b.ranks = ranks;
    b.group_docs = group_docs;
    b.docs = docs;
    b.lengths = p.lengths;
    basp::capi::write_out_struct(out, b);
    if (predicted_seconds != nullptr) *predicted_seconds = result.predicted_seconds;
  });
}

}  // namespace

basp_status_t basp_batch_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, const basp_batch_t* batch,
                                     basp_plan_t* plan) {
  return guarded(__func__, [&] {
    if (plan != nullptr) *plan = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_plan_desc_v1 d = basp::capi::read_struct(desc, kPlanDefaults, BASP_PLAN_DESC_MAGIC,
                                                        BASP_PLAN_DESC_VERSION, "desc", kBatchPlanDescFirstSize);
    const basp_batch_v1 b = basp::capi::read_struct(batch, kBatchDefaults, BASP_BATCH_MAGIC, BASP_BATCH_VERSION,
                                                    "batch", sizeof(basp_batch_v1));
    BASP_CHECK(plan != nullptr, BASP_ERROR_NULL_POINTER, "plan (the output handle) is NULL");
    c->batch_transport(__func__);  // a comm without batch plans is named before its arguments
    auto handle = std::make_unique<basp_plan>();
    handle->impl = basp::runtime::make_batch_plan(c, read_batch_request(d, b, c->layout().world_size));
    basp::capi::register_plan(handle.get());
    *plan = handle.release();
  });
}

basp_status_t basp_comm_partition_batch(basp_comm_t comm, const basp_batch_problem_t* problem, int32_t* group_sizes,
                                        int32_t* ranks, int32_t* group_docs, int32_t* docs, basp_batch_t* out,
                                        double* predicted_seconds) {
  return partition_batch(__func__, comm, problem, group_sizes, ranks, group_docs, docs, out, predicted_seconds);
}

basp_status_t basp_comm_plan_batch(basp_comm_t comm, const basp_batch_problem_t* problem, int32_t* group_sizes,
                                   int32_t* ranks, int32_t* group_docs, int32_t* docs, basp_batch_t* out,
                                   double* predicted_seconds) {
  return partition_batch(__func__, comm, problem, group_sizes, ranks, group_docs, docs, out, predicted_seconds);
}

basp_status_t basp_comm_get_cost_model(basp_comm_t comm, basp_cost_model_t* model) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    basp::capi::check_out_struct(model, BASP_COST_MODEL_MAGIC, kModelFirstSize, "model");
    const basp::plan::CostModel m = c->cost_model();
    basp_cost_model_v1 out = BASP_COST_MODEL_INITIALIZER;
    out.a0 = m.a0;
    out.a1 = m.a1;
    out.beta_node = m.beta_node;
    out.beta_network = m.beta_network;
    out.c2 = m.c2;
    out.c1 = m.c1;
    out.calibrated = m.source == "calibrated" ? 1 : 0;
    out.per_piece = m.per_piece;
    basp::capi::write_out_struct(model, out);
  });
}

basp_status_t basp_comm_set_cost_model(basp_comm_t comm, const basp_cost_model_t* model) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_cost_model_v1 in = basp::capi::read_struct(model, kModelDefaults, BASP_COST_MODEL_MAGIC,
                                                          BASP_COST_MODEL_VERSION, "model", kModelFirstSize);
    basp::plan::CostModel m = c->cost_model();
    m.a0 = in.a0;
    m.a1 = in.a1;
    m.beta_node = in.beta_node;
    m.beta_network = in.beta_network;
    m.c2 = in.c2;
    m.c1 = in.c1;
    // A caller built before per_piece (a smaller struct) does not know it: the comm keeps its own, as calibrated.
    if (model->size > kModelFirstSize) m.per_piece = in.per_piece;
    basp::plan::check_cost_model(m, "model->");
    BASP_CHECK_ARG(in.calibrated == 0 || in.calibrated == 1, "model->calibrated (", in.calibrated, ") must be 0 or 1");
    BASP_CHECK_ARG(in.reserved0 == 0, "model->reserved0 (", in.reserved0, ") must be 0");
    m.source = in.calibrated ? "calibrated" : "set";
    c->set_cost_model(m);
  });
}

basp_status_t basp_comm_calibrate(basp_comm_t comm, int64_t max_bytes, int32_t repeats) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    basp::runtime::calibrate(c, max_bytes, repeats);
  });
}

basp_status_t basp_comm_export_cost_model(basp_comm_t comm, char* text, size_t capacity, size_t* needed) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const std::string s = basp::plan::export_cost_model(c->cost_model());
    if (needed != nullptr) *needed = s.size() + 1;
    if (text == nullptr && capacity == 0) return;  // a size query
    BASP_CHECK(text != nullptr, BASP_ERROR_NULL_POINTER, "text is NULL with capacity (", capacity, ")");
    BASP_CHECK_ARG(capacity >= s.size() + 1, "capacity (", capacity, ") is less than the ", s.size() + 1,
                   " bytes the text needs");
    std::memcpy(text, s.c_str(), s.size() + 1);
  });
}

basp_status_t basp_comm_import_cost_model(basp_comm_t comm, const char* text) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    BASP_CHECK(text != nullptr, BASP_ERROR_NULL_POINTER, "text is NULL");
    const size_t n = strnlen(text, size_t{1} << 20);
    BASP_CHECK_ARG(n < (size_t{1} << 20), "text is longer than 1 MiB: not a cost model");
    c->set_cost_model(basp::plan::import_cost_model(std::string(text, n)));
  });
}
