// The C ABI of split-phase head chunks (basp.h, "Split-phase exchanges by head chunks"): marshalling only; the
// rules and the progress thread live in runtime/ (plan.h, progress.h).
#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/direction.h"
#include "common/error.h"
#include "runtime/plan.h"

namespace {

using basp::Direction;
using basp::capi::guarded;

basp_status_t start(const char* call, Direction direction, basp_plan_t plan, int32_t chunk, int32_t num_chunks,
                    int64_t num_tokens, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(call, [&] {
    basp::capi::plan_ref(plan, "plan")->start(direction, chunk, num_chunks, num_tokens, inputs, outputs, stream);
  });
}

basp_status_t test(const char* call, Direction direction, basp_plan_t plan, int32_t chunk, int32_t* done) {
  return guarded(call, [&] {
    BASP_CHECK(done != nullptr, BASP_ERROR_NULL_POINTER, "done is NULL");
    *done = 0;
    *done = basp::capi::plan_ref(plan, "plan")->test(direction, chunk) ? 1 : 0;
  });
}

basp_status_t wait(const char* call, Direction direction, basp_plan_t plan, int32_t chunk) {
  return guarded(call, [&] { basp::capi::plan_ref(plan, "plan")->wait(direction, chunk); });
}

}  // namespace

basp_status_t basp_scatter_start(basp_plan_t plan, int32_t chunk, int32_t num_chunks, int64_t num_tokens,
                                 const void* const* inputs, void* const* outputs, void* stream) {
  return start(__func__, Direction::kScatter, plan, chunk, num_chunks, num_tokens, inputs, outputs, stream);
}

basp_status_t basp_gather_start(basp_plan_t plan, int32_t chunk, int32_t num_chunks, int64_t num_tokens,
                                const void* const* inputs, void* const* outputs, void* stream) {
  return start(__func__, Direction::kGather, plan, chunk, num_chunks, num_tokens, inputs, outputs, stream);
}

basp_status_t basp_scatter_test(basp_plan_t plan, int32_t chunk, int32_t* done) {
  return test(__func__, Direction::kScatter, plan, chunk, done);
}

basp_status_t basp_gather_test(basp_plan_t plan, int32_t chunk, int32_t* done) {
  return test(__func__, Direction::kGather, plan, chunk, done);
}

basp_status_t basp_scatter_wait(basp_plan_t plan, int32_t chunk) {
  return wait(__func__, Direction::kScatter, plan, chunk);
}

basp_status_t basp_gather_wait(basp_plan_t plan, int32_t chunk) {
  return wait(__func__, Direction::kGather, plan, chunk);
}
