// The C ABI of batch plans, the batch planner and the cost model (basp.h, "Batch plans"): marshalling only, as in
// capi.cpp. Every check runs before the first byte of output is written.
#include <cstring>
#include <memory>
#include <string>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "plan/batch_planner.h"
#include "plan/cost_model.h"
#include "runtime/batch.h"
#include "runtime/calibrate.h"
#include "runtime/plan.h"

namespace {

using basp::capi::guarded;

constexpr basp_plan_desc_v1 kPlanDefaults = BASP_PLAN_DESC_INITIALIZER;
constexpr basp_batch_v1 kBatchDefaults = BASP_BATCH_INITIALIZER;
constexpr basp_batch_problem_v1 kProblemDefaults = BASP_BATCH_PROBLEM_INITIALIZER;
constexpr basp_cost_model_v1 kModelDefaults = BASP_COST_MODEL_INITIALIZER;

}  // namespace

basp_status_t basp_batch_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, const basp_batch_t* batch,
                                     basp_plan_t* plan) {
  return guarded(__func__, [&] {
    if (plan != nullptr) *plan = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_plan_desc_v1 d = basp::capi::read_struct(desc, kPlanDefaults, BASP_PLAN_DESC_MAGIC,
                                                        BASP_PLAN_DESC_VERSION, "desc", sizeof(basp_plan_desc_v1));
    const basp_batch_v1 b = basp::capi::read_struct(batch, kBatchDefaults, BASP_BATCH_MAGIC, BASP_BATCH_VERSION,
                                                    "batch", sizeof(basp_batch_v1));
    BASP_CHECK(plan != nullptr, BASP_ERROR_NULL_POINTER, "plan (the output handle) is NULL");
    auto handle = std::make_unique<basp_plan>();
    handle->impl = basp::runtime::make_batch_plan(c, d, b);
    basp::capi::register_plan(handle.get());
    *plan = handle.release();
  });
}

basp_status_t basp_comm_plan_batch(basp_comm_t comm, const basp_batch_problem_t* problem, int32_t* group_sizes,
                                   int32_t* ranks, int32_t* group_docs, int32_t* docs, basp_batch_t* out,
                                   double* predicted_seconds) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_batch_problem_v1 p =
        basp::capi::read_struct(problem, kProblemDefaults, BASP_BATCH_PROBLEM_MAGIC, BASP_BATCH_PROBLEM_VERSION,
                                "problem", sizeof(basp_batch_problem_v1));
    BASP_CHECK(group_sizes != nullptr, BASP_ERROR_NULL_POINTER, "group_sizes is NULL");
    BASP_CHECK(ranks != nullptr, BASP_ERROR_NULL_POINTER, "ranks is NULL");
    BASP_CHECK(group_docs != nullptr, BASP_ERROR_NULL_POINTER, "group_docs is NULL");
    BASP_CHECK(docs != nullptr, BASP_ERROR_NULL_POINTER, "docs is NULL");
    basp::capi::check_out_struct(out, BASP_BATCH_MAGIC, sizeof(basp_batch_v1), "out");
    c->batch_transport(__func__);
    const basp::plan::BatchPartition result = basp::plan::plan_batch(basp::runtime::batch_problem(*c, p));
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

basp_status_t basp_comm_get_cost_model(basp_comm_t comm, basp_cost_model_t* model) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    basp::capi::check_out_struct(model, BASP_COST_MODEL_MAGIC, sizeof(basp_cost_model_v1), "model");
    const basp::plan::CostModel m = c->cost_model();
    basp_cost_model_v1 out = BASP_COST_MODEL_INITIALIZER;
    out.a0 = m.a0;
    out.a1 = m.a1;
    out.beta_node = m.beta_node;
    out.beta_network = m.beta_network;
    out.c2 = m.c2;
    out.c1 = m.c1;
    out.calibrated = m.source == "calibrated" ? 1 : 0;
    basp::capi::write_out_struct(model, out);
  });
}

basp_status_t basp_comm_set_cost_model(basp_comm_t comm, const basp_cost_model_t* model) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_cost_model_v1 in = basp::capi::read_struct(model, kModelDefaults, BASP_COST_MODEL_MAGIC,
                                                          BASP_COST_MODEL_VERSION, "model", sizeof(basp_cost_model_v1));
    basp::plan::CostModel m = c->cost_model();
    m.a0 = in.a0;
    m.a1 = in.a1;
    m.beta_node = in.beta_node;
    m.beta_network = in.beta_network;
    m.c2 = in.c2;
    m.c1 = in.c1;
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
