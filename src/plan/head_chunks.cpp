#include "plan/head_chunks.h"

#include <algorithm>
#include <limits>

#include "common/checked.h"
#include "common/error.h"
#include "common/split.h"

namespace basp::plan {

using detail::checked_add;
using detail::checked_mul;

namespace {

void check_tensor(const ExchangePlan& plan, int32_t t) {
  BASP_CHECK_ARG(t >= 0 && t < plan.num_tensors(), "tensor (", t, ") is outside 0..", plan.num_tensors() - 1);
}

void check_position(const ExchangePlan& plan, const char* what, int32_t j) {
  BASP_CHECK_ARG(j >= 0 && j < plan.group_size, what, " (", j, ") is outside 0..", plan.group_size - 1);
}

// Position j's split heads of geometry g in `chunk`, the arguments already checked.
HeadSpan split_span(const layout::Geometry& g, int64_t j, HeadChunk chunk) {
  const int64_t a = g.split_begin(j);
  const int64_t n = g.split_begin(j + 1) - a;
  return {a + detail::split_begin(n, chunk.count, chunk.index),
          a + detail::split_begin(n, chunk.count, chunk.index + 1)};
}

// The heads of g that `chunk` moves to (scatter) or from (gather) position j, the arguments already checked.
HeadSpan moved_span(const layout::Geometry& g, int64_t j, HeadChunk chunk, Direction direction) {
  return g.chunk(chunk.index, chunk.count, direction == Direction::kGather).moved(j);
}

int64_t span_bytes(const layout::Geometry& g, int64_t from, int64_t to, HeadChunk chunk, Direction direction) {
  const bool scatter = direction == Direction::kScatter;
  const int64_t seq_side = scatter ? from : to;
  const int64_t head_side = scatter ? to : from;
  const HeadSpan heads = moved_span(g, head_side, chunk, direction);
  return checked_mul(checked_mul(g.seq_rows(seq_side), heads.size(), "head chunk rows"), g.dim_bytes(),
                     "head chunk bytes");
}

int64_t span_pieces(const layout::Geometry& g, int64_t from, int64_t to, HeadChunk chunk, Direction direction) {
  const bool scatter = direction == Direction::kScatter;
  const HeadSpan heads = moved_span(g, scatter ? to : from, chunk, direction);
  return heads.size() > 0 ? g.seq_rows(scatter ? from : to) : 0;
}

void check_tokens(int64_t tokens) { BASP_CHECK_ARG(tokens >= 0, "tokens (", tokens, ") must be >= 0"); }

}  // namespace

int32_t max_head_chunks(const ExchangePlan& plan) {
  int64_t most = 1;
  for (const layout::Geometry& g : plan.tensors) most = std::max(most, detail::split_count(g.split_heads, g.k, 0));
  return static_cast<int32_t>(std::min<int64_t>(most, std::numeric_limits<int32_t>::max()));
}

void check_head_chunk(const ExchangePlan& plan, HeadChunk chunk) {
  BASP_CHECK_ARG(chunk.count >= 1, "head chunk count (", chunk.count, ") must be at least 1");
  const int32_t most = max_head_chunks(plan);
  BASP_CHECK_ARG(chunk.count <= most, "head chunk count (", chunk.count, ") is above the plan's maximum (", most,
                 ": the query heads of its busiest position)");
  BASP_CHECK_ARG(chunk.index >= 0 && chunk.index < chunk.count, "head chunk index (", chunk.index, ") is outside 0..",
                 chunk.count - 1);
}

HeadSpan chunk_split_heads(const ExchangePlan& plan, int32_t t, int32_t j, HeadChunk chunk) {
  check_tensor(plan, t);
  check_position(plan, "position", j);
  check_head_chunk(plan, chunk);
  return split_span(plan.tensors[static_cast<size_t>(t)], j, chunk);
}

HeadSpan chunk_heads(const ExchangePlan& plan, int32_t t, int32_t j, HeadChunk chunk, Direction direction) {
  check_tensor(plan, t);
  check_position(plan, "position", j);
  check_head_chunk(plan, chunk);
  return moved_span(plan.tensors[static_cast<size_t>(t)], j, chunk, direction);
}

int64_t chunk_bytes(const ExchangePlan& plan, int64_t tokens, int32_t t, HeadChunk chunk, Direction direction,
                    int32_t from, int32_t to) {
  check_tokens(tokens);
  check_tensor(plan, t);
  check_position(plan, "from", from);
  check_position(plan, "to", to);
  check_head_chunk(plan, chunk);
  return span_bytes(plan.at(t, tokens), from, to, chunk, direction);
}

// The most that one ordered pair of positions moves in chunk `chunk`, summed over the tensors: `of(geometry, from,
// to)` per tensor (its bytes or its row pieces), `what` naming the sum in an overflow message.
template <typename Of>
int64_t busiest_pair(const ExchangePlan& plan, int64_t tokens, HeadChunk chunk, Of&& of, const char* what) {
  check_tokens(tokens);
  check_head_chunk(plan, chunk);
  int64_t most = 0;
  for (int32_t from = 0; from < plan.group_size; ++from) {
    for (int32_t to = 0; to < plan.group_size; ++to) {
      if (from == to) continue;
      int64_t sum = 0;
      for (int32_t t = 0; t < plan.num_tensors(); ++t) sum = checked_add(sum, of(plan.at(t, tokens), from, to), what);
      most = std::max(most, sum);
    }
  }
  return most;
}

int64_t chunk_per_peer(const ExchangePlan& plan, int64_t tokens, HeadChunk chunk, Direction direction) {
  return busiest_pair(
      plan, tokens, chunk,
      [&](const layout::Geometry& g, int32_t from, int32_t to) { return span_bytes(g, from, to, chunk, direction); },
      "head chunk bytes");
}

int64_t chunk_pieces_per_peer(const ExchangePlan& plan, int64_t tokens, HeadChunk chunk, Direction direction) {
  return busiest_pair(
      plan, tokens, chunk,
      [&](const layout::Geometry& g, int32_t from, int32_t to) { return span_pieces(g, from, to, chunk, direction); },
      "head chunk pieces");
}

}  // namespace basp::plan
