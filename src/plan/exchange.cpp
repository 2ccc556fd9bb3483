#include "plan/exchange.h"

#include <algorithm>

#include "common/checked.h"
#include "common/error.h"
#include "plan/dtype.h"
#include "plan/head_chunks.h"

namespace basp::plan {

using detail::checked_add;
using detail::checked_mul;

namespace {

// The descriptor's layout and element type.
ExchangeSpec check_kind(const basp_plan_desc_v1& d) {
  BASP_CHECK_ARG(d.layout >= 0 && d.layout < BASP_LAYOUT_COUNT, "layout (", d.layout,
                 ") is not a basp_layout_t value (0..", BASP_LAYOUT_COUNT - 1, ")");
  BASP_CHECK_ARG(d.dtype != BASP_DTYPE_UNSET, "dtype (", d.dtype,
                 ", BASP_DTYPE_UNSET) is not set: a plan needs the element type of its tensors");
  BASP_CHECK_ARG(dtype_size(d.dtype) > 0, "dtype (", d.dtype, ") is not a basp_dtype_t value (0..",
                 BASP_DTYPE_UNSET - 1, ")");
  ExchangeSpec spec;
  spec.layout = d.layout;
  spec.dtype = d.dtype;
  spec.elem_size = dtype_size(d.dtype);
  return spec;
}

// A BSHD or SBHD descriptor's sequence length.
int64_t check_seq_len(const basp_plan_desc_v1& d) {
  BASP_CHECK_ARG(d.seq_len > 0, "seq_len (", d.seq_len, ") must be positive");
  BASP_CHECK_ARG(d.token_capacity == 0, "token_capacity (", d.token_capacity,
                 ") must be 0 unless the layout is BASP_LAYOUT_THD");
  return d.seq_len;
}

// Tensor t's head size: head_dims[t], or head_dim where that is 0.
int64_t head_dim_of(const basp_plan_desc_v1& d, int32_t t) {
  const int64_t own = d.head_dims[t];
  BASP_CHECK_ARG(own >= 0, "head_dims[", t, "] (", own, ") must be positive, or 0 for head_dim");
  if (own > 0) return own;
  BASP_CHECK_ARG(d.head_dim > 0, "head_dim (", d.head_dim, ") must be positive: head_dims[", t,
                 "] is 0, which stands for head_dim");
  return d.head_dim;
}

// The descriptor's head sizes and tensors into `spec`.
void check_tensors(const basp_plan_desc_v1& d, ExchangeSpec& spec) {
  BASP_CHECK_ARG(d.head_dim >= -1, "head_dim (", d.head_dim,
                 ") must be positive, or -1 or 0 (unset) when every tensor sets head_dims[t]");
  BASP_CHECK_ARG(d.num_tensors >= 1 && d.num_tensors <= BASP_MAX_TENSORS, "num_tensors (", d.num_tensors,
                 ") must be in 1..", BASP_MAX_TENSORS);
  BASP_CHECK_ARG(d.reserved0 == 0, "reserved0 (", d.reserved0, ") must be 0");
  for (int32_t t = 0; t < BASP_MAX_TENSORS; ++t) {
    const int64_t h = d.num_heads[t];
    const int64_t q = d.query_heads[t];
    if (t >= d.num_tensors) {
      BASP_CHECK_ARG(h == 0, "num_heads[", t, "] (", h, ") must be 0: only ", d.num_tensors, " tensors");
      BASP_CHECK_ARG(q == 0, "query_heads[", t, "] (", q, ") must be 0: only ", d.num_tensors, " tensors");
      BASP_CHECK_ARG(d.head_dims[t] == 0, "head_dims[", t, "] (", d.head_dims[t], ") must be 0: only ", d.num_tensors,
                     " tensors");
      continue;
    }
    spec.head_dims.push_back(head_dim_of(d, t));
    BASP_CHECK_ARG(h > 0, "num_heads[", t, "] (", h, ") must be positive");
    BASP_CHECK_ARG(q >= 0, "query_heads[", t, "] (", q, ") must be 0 (query-like) or a query head count");
    BASP_CHECK_ARG(q == 0 || q % h == 0, "num_heads[", t, "] (", h, ") does not divide its query head count (", q, ")");
    spec.num_heads.push_back(h);
    spec.split_heads.push_back(q == 0 ? h : q);
  }
}

}  // namespace

ExchangeSpec validate_spec(const basp_plan_desc_v1& d) {
  ExchangeSpec spec = check_kind(d);
  if (spec.thd()) {
    BASP_CHECK_ARG(d.token_capacity > 0, "token_capacity (", d.token_capacity,
                   ") must be positive for a THD plan: the most tokens of a group's stream in one execute");
    BASP_CHECK_ARG(d.seq_len == -1 || d.seq_len == d.token_capacity, "seq_len (", d.seq_len,
                   ") must be -1 or token_capacity (", d.token_capacity, ") for a THD plan");
    spec.seq_len = d.token_capacity;
  } else {
    spec.seq_len = check_seq_len(d);
  }
  check_tensors(d, spec);
  return spec;
}

ExchangeSpec validate_batch_tensors(const basp_plan_desc_v1& d) {
  ExchangeSpec spec = check_kind(d);
  if (spec.thd()) {
    BASP_CHECK_ARG(d.token_capacity >= 0, "token_capacity (", d.token_capacity,
                   ") must be 0 (each group's stream) or positive for a THD batch plan");
    BASP_CHECK_ARG(d.seq_len == -1 || (d.token_capacity > 0 && d.seq_len == d.token_capacity), "seq_len (", d.seq_len,
                   ") must be -1", d.token_capacity > 0 ? " or token_capacity" : "", " for a THD plan");
  } else {
    spec.seq_len = check_seq_len(d);
  }
  check_tensors(d, spec);
  return spec;
}

namespace {

int64_t align64(int64_t v) { return checked_add(v, 63, "workspace bytes") / 64 * 64; }

// The head count whose split defines the head chunks (plan/head_chunks.h): the largest split_heads of the tensors.
int64_t chunk_basis(const ExchangeSpec& spec) {
  int64_t most = 0;
  for (const int64_t h : spec.split_heads) most = std::max(most, h);
  return most;
}

}  // namespace

void ExchangePlan::call(int64_t tokens, HeadChunk chunk, Direction direction, CallGeometry& c) const {
  if (chunk.index != 0 || chunk.count != 1) check_head_chunk(*this, chunk);
  c.tokens = tokens;
  c.chunk = chunk;
  c.direction = direction;
  c.num_tensors = num_tensors();
  for (int32_t t = 0; t < c.num_tensors; ++t) {
    const auto i = static_cast<size_t>(t);
    c.tensors[i] = at(t, tokens);
    c.tensors[i].chunk_index = chunk.index;
    c.tensors[i].chunk_count = chunk.count;
    c.tensors[i].chunk_flags = (c.tensors[i].chunk_flags & layout::Geometry::kChunkAtEnds) |
                               (direction == Direction::kGather ? layout::Geometry::kChunkGather : 0);
    c.seq_bytes[i] = c.tensors[i].seq_tensor_bytes(position);
    c.head_bytes[i] = c.tensors[i].head_tensor_bytes(position);
  }
}

int64_t ExchangePlan::workspace_offset(int32_t owner, int32_t t, int32_t j, const layout::Geometry& g) const {
  const auto& held = held_before_[static_cast<size_t>(t)];
  const int64_t before = held[static_cast<size_t>(j)] - (j > owner ? g.heads_of(owner) : 0);
  return workspace_base_[static_cast<size_t>(owner)][static_cast<size_t>(t)] +
         g.seq_rows(owner) * (g.dim_bytes() * before + (g.whole() ? 0 : g.moved_skip_bytes(j)));
}

int64_t ExchangePlan::region_offset(int32_t owner, int32_t t, int32_t j, const layout::Geometry& g,
                                    Direction direction) const {
  const int64_t base = region_base_[static_cast<size_t>(owner)][static_cast<size_t>(t)];
  if (direction == Direction::kScatter) {
    return base + g.seq_rows(owner) * (g.dim_bytes() * held_before_[static_cast<size_t>(t)][j] +
                                       (g.whole() ? 0 : g.moved_skip_bytes(j)));
  }
  return base + g.b_loc * (g.head_row_bytes(owner) * g.tok_begin(j) +
                           (g.whole() ? 0 : g.tok_count(j) * g.moved_skip_bytes(owner)));
}

ExchangePlan make_exchange_plan(const ExchangeSpec& spec, int32_t group_size, int32_t position,
                                int64_t local_sequences) {
  BASP_CHECK_ARG(group_size > 0, "group size (", group_size, ") must be positive");
  BASP_CHECK_ARG(position >= 0 && position < group_size, "position (", position, ") is outside 0..", group_size - 1);
  if (spec.thd()) local_sequences = 1;
  BASP_CHECK_ARG(local_sequences > 0, "local sequences (", local_sequences, ") must be positive");
  ExchangePlan p;
  p.spec = spec;
  p.group_size = group_size;
  p.position = position;
  p.local_sequences = local_sequences;
  const int32_t k = group_size;
  const auto n = spec.num_heads.size();
  const int64_t basis = chunk_basis(spec);
  p.workspace_base_.assign(static_cast<size_t>(k), std::vector<int64_t>(n + 1, 0));
  p.region_base_.assign(static_cast<size_t>(k), std::vector<int64_t>(n + 1, 0));
  for (size_t t = 0; t < n; ++t) {
    layout::Geometry g;
    g.layout = spec.layout;
    g.b_loc = local_sequences;
    g.seq_len = spec.seq_len;
    g.k = k;
    g.me = position;
    g.heads = spec.num_heads[t];
    g.split_heads = spec.split_heads[t];
    g.head_dim = spec.head_dims[t];
    g.elem = spec.elem_size;
    // Head chunks (plan/head_chunks.h): a query-like tensor below the basis moves all its heads at the ends.
    if (g.split_heads == g.heads && g.split_heads < basis) g.chunk_flags = layout::Geometry::kChunkAtEnds;
    // Every product the index math forms must fit: the largest are the tensors' byte sizes, over every position.
    const int64_t row_bytes = checked_mul(checked_mul(g.heads, g.head_dim, "heads * head_dim"), g.elem, "row bytes");
    const int64_t rows = checked_mul(g.b_loc, g.seq_len, "local sequences * tokens");
    (void)checked_mul(rows, checked_mul(g.split_heads, checked_mul(g.head_dim, g.elem, "head bytes"), "row bytes"),
                      "tensor bytes");
    (void)row_bytes;
    std::vector<int64_t> held(static_cast<size_t>(k) + 1, 0);
    for (int32_t j = 0; j < k; ++j) held[static_cast<size_t>(j) + 1] = held[static_cast<size_t>(j)] + g.heads_of(j);
    const int64_t total = held.back();
    for (int32_t o = 0; o < k; ++o) {
      const int64_t send = checked_mul(g.seq_rows(o) * g.dim_bytes(), total - g.heads_of(o), "workspace bytes");
      auto& w = p.workspace_base_[static_cast<size_t>(o)];
      w[t + 1] = checked_add(w[t], align64(send), "workspace bytes");
      const int64_t scatter_side = checked_mul(g.seq_rows(o) * g.dim_bytes(), total, "staging bytes");
      const int64_t gather_side = g.head_tensor_bytes(o);
      auto& r = p.region_base_[static_cast<size_t>(o)];
      r[t + 1] = checked_add(r[t], align64(std::max(scatter_side, gather_side)), "staging bytes");
    }
    p.bytes_sent =
        checked_add(p.bytes_sent, g.seq_rows(position) * g.dim_bytes() * (total - g.heads_of(position)), "bytes sent");
    p.replicated = p.replicated || g.replicated();
    p.held_before_.push_back(std::move(held));
    p.tensors.push_back(g);
  }
  return p;
}

}  // namespace basp::plan
