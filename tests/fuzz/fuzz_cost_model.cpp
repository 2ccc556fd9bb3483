// libFuzzer target: import_cost_model (plan/cost_model.h), the strict reader of the cost model's text form, on any
// bytes. Expected: a model, or BASP_ERROR_INVALID_ARGUMENT, never a crash; anything thrown but a detail::Error
// propagates, so the fuzzer reports it. A model that reads must export, and read back to the same fields bit for
// bit (the text form is exact).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"
#include "plan/cost_model.h"

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same(const basp::plan::CostModel& a, const basp::plan::CostModel& b) {
  return same_bits(a.a0, b.a0) && same_bits(a.a1, b.a1) && same_bits(a.beta_node, b.beta_node) &&
         same_bits(a.beta_network, b.beta_network) && same_bits(a.c2, b.c2) && same_bits(a.c1, b.c1) &&
         a.source == b.source && a.world_size == b.world_size && a.num_nodes == b.num_nodes && a.note == b.note;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  basp::plan::CostModel model;
  try {
    model = basp::plan::import_cost_model(text);
  } catch (const basp::detail::Error& e) {
    if (e.status() != BASP_ERROR_INVALID_ARGUMENT) std::abort();
    return 0;
  }
  // What was read is valid: export cannot refuse it, and the round trip is exact (an Error here escapes: a bug).
  const std::string again = basp::plan::export_cost_model(model);
  if (!same(basp::plan::import_cost_model(again), model)) std::abort();
  // And export is a fixed point: the exported text exports to itself.
  if (basp::plan::export_cost_model(basp::plan::import_cost_model(again)) != again) std::abort();
  return 0;
}
