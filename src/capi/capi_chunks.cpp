// The C ABI of the head chunk choice (basp.h, basp_choose_head_chunks): marshalling only, as in capi.cpp. Every
// check runs before the first byte of output is written.
#include <algorithm>
#include <cstddef>
#include <exception>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "runtime/head_chunk_choice.h"
#include "runtime/plan.h"

namespace {

using basp::capi::guarded;

// The caller's outputs: the struct's header and the array, checked before anything is written.
void check_outputs(basp_head_chunk_choice_t* choice, const double* predicted_seconds, int32_t capacity) {
  basp::capi::check_out_struct(choice, BASP_HEAD_CHUNK_CHOICE_MAGIC, sizeof(basp_head_chunk_choice_v1), "choice");
  BASP_CHECK_ARG(capacity >= 0, "capacity (", capacity, ") must not be negative");
  BASP_CHECK(capacity == 0 || predicted_seconds != nullptr, BASP_ERROR_NULL_POINTER,
             "predicted_seconds is NULL but capacity is ", capacity);
}

}  // namespace

extern "C" {

basp_status_t basp_choose_head_chunks(basp_plan_t scatter, basp_plan_t gather, int64_t num_tokens,
                                      double attention_seconds, int32_t collective, basp_head_chunk_choice_t* choice,
                                      double* predicted_seconds, int32_t capacity) {
  return guarded(__func__, [&] {
    BASP_CHECK_ARG(collective == 0 || collective == 1, "collective (", collective, ") must be 0 or 1");
    const auto s = basp::capi::plan_ref(scatter, "scatter");
    const auto g = gather == nullptr ? s : basp::capi::plan_ref(gather, "gather");
    std::exception_ptr local_error;
    try {
      check_outputs(choice, predicted_seconds, capacity);
    } catch (const basp::detail::Error&) {
      local_error = std::current_exception();
    }
    const basp::runtime::LayerHeadChunks layer =
        basp::runtime::choose_head_chunks(*s, *g, num_tokens, attention_seconds, collective == 1, local_error);
    const basp::plan::HeadChunkChoice& c = layer.choice;
    basp_head_chunk_choice_v1 out = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
    out.num_chunks = c.count;
    out.max_head_chunks = static_cast<int32_t>(c.predicted.size());
    out.attention_seconds = layer.attention_seconds;
    out.seconds_one = c.predicted.front();
    out.seconds_chosen = c.predicted[static_cast<size_t>(c.count - 1)];
    const size_t n = std::min(c.predicted.size(), static_cast<size_t>(capacity));
    std::copy(c.predicted.begin(), c.predicted.begin() + static_cast<std::ptrdiff_t>(n), predicted_seconds);
    basp::capi::write_out_struct(choice, out);
  });
}

}  // extern "C"
