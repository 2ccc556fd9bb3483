#include "plan/head_chunk_choice.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/split.h"
#include "plan/head_chunks.h"

namespace basp::plan {

namespace {

void check_nonnegative(const char* what, double v) {
  BASP_CHECK_ARG(std::isfinite(v) && v >= 0.0, what, " (", v, ") must be finite and >= 0");
}

// The seconds of each of the `count` chunks of an exchange in `direction`.
std::vector<double> exchange_chunks(const ExchangePlan& plan, int64_t tokens, int32_t count, Direction direction,
                                    const CostModel& model, const GroupTraffic& unit) {
  std::vector<double> out;
  for (int32_t c = 0; c < count; ++c) {
    const auto per_peer = static_cast<double>(chunk_per_peer(plan, tokens, {c, count}, direction));
    // Pieces to the peers of its unit (unit.node_bytes of them per per-peer piece), none across a link.
    const double pieces =
        unit.network_bytes > 0.0
            ? 0.0
            : static_cast<double>(chunk_pieces_per_peer(plan, tokens, {c, count}, direction)) * unit.node_bytes;
    out.push_back(model.exchange_seconds(plan.group_size, per_peer * unit.node_bytes, per_peer * unit.network_bytes) +
                  model.chunk_piece_seconds(pieces, count));
  }
  return out;
}

}  // namespace

double pipelined_seconds(const std::vector<double>& scatter, const std::vector<double>& attention,
                         const std::vector<double>& gather) {
  const size_t n = attention.size();
  BASP_CHECK_ARG(n >= 1 && scatter.size() == n && gather.size() == n, "chunk seconds: scatter (", scatter.size(),
                 "), attention (", n, ") and gather (", gather.size(), ") must have one common size >= 1");
  double total = scatter.front() + gather.back();
  for (size_t c = 0; c < n; ++c) {
    const double next_scatter = c + 1 < n ? scatter[c + 1] : 0.0;
    const double previous_gather = c > 0 ? gather[c - 1] : 0.0;
    total += std::max(attention[c], next_scatter + previous_gather);
  }
  return total;
}

HeadChunkChoice choose_head_chunks(const ExchangePlan& scatter, const ExchangePlan& gather, int64_t tokens,
                                   const CostModel& model, const GroupTraffic& unit, double attention_seconds) {
  BASP_CHECK_ARG(scatter.group_size == gather.group_size, "the scatter plan's group size (", scatter.group_size,
                 ") differs from the gather plan's (", gather.group_size, ")");
  const int32_t most = max_head_chunks(scatter);
  BASP_CHECK_ARG(most == max_head_chunks(gather), "the scatter plan's maximum head chunks (", most,
                 ") differs from the gather plan's (", max_head_chunks(gather), ")");
  BASP_CHECK_ARG(tokens >= 0, "tokens (", tokens, ") must be >= 0");
  check_cost_model(model, "model.");
  check_nonnegative("unit.node_bytes", unit.node_bytes);
  check_nonnegative("unit.network_bytes", unit.network_bytes);
  check_nonnegative("attention_seconds", attention_seconds);
  HeadChunkChoice choice;
  for (int32_t count = 1; count <= most; ++count) {
    std::vector<double> attention;
    for (int32_t c = 0; c < count; ++c)
      attention.push_back(attention_seconds * static_cast<double>(detail::split_count(most, count, c)) / most);
    choice.predicted.push_back(
        pipelined_seconds(exchange_chunks(scatter, tokens, count, Direction::kScatter, model, unit), attention,
                          exchange_chunks(gather, tokens, count, Direction::kGather, model, unit)));
  }
  const auto best = std::min_element(choice.predicted.begin(), choice.predicted.end());
  const double one = choice.predicted.front();
  if (*best <= (1.0 - kMinHeadChunkGain) * one)
    choice.count = static_cast<int32_t>(best - choice.predicted.begin()) + 1;
  return choice;
}

}  // namespace basp::plan
