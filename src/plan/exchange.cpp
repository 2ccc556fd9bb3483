#include "plan/exchange.h"

#include "common/checked.h"
#include "common/error.h"
#include "plan/dtype.h"

namespace basp::plan {

using detail::checked_add;
using detail::checked_mul;

ExchangeSpec validate_spec(const basp_plan_desc_v1& d, int32_t group_size) {
  BASP_CHECK_ARG(d.layout >= 0 && d.layout < BASP_LAYOUT_COUNT, "layout (", d.layout,
                 ") is not a basp_layout_t value (0..", BASP_LAYOUT_COUNT - 1, ")");
  BASP_CHECK_ARG(d.dtype != BASP_DTYPE_UNSET, "dtype (", d.dtype,
                 ", BASP_DTYPE_UNSET) is not set: a plan needs the element type of its tensors");
  BASP_CHECK_ARG(dtype_size(d.dtype) > 0, "dtype (", d.dtype, ") is not a basp_dtype_t value (0..",
                 BASP_DTYPE_UNSET - 1, ")");
  BASP_CHECK_ARG(d.seq_len > 0, "seq_len (", d.seq_len, ") must be positive");
  BASP_CHECK_ARG(d.seq_len % group_size == 0, "seq_len (", d.seq_len, ") is not divisible by group size (", group_size,
                 ")");
  BASP_CHECK_ARG(d.head_dim > 0, "head_dim (", d.head_dim, ") must be positive");
  BASP_CHECK_ARG(d.num_tensors >= 1 && d.num_tensors <= BASP_MAX_TENSORS, "num_tensors (", d.num_tensors,
                 ") must be in 1..", BASP_MAX_TENSORS);
  BASP_CHECK_ARG(d.reserved0 == 0, "reserved0 (", d.reserved0, ") must be 0");
  ExchangeSpec spec;
  spec.layout = d.layout;
  spec.elem_size = dtype_size(d.dtype);
  spec.seq_len = d.seq_len;
  spec.head_dim = d.head_dim;
  for (int32_t t = 0; t < BASP_MAX_TENSORS; ++t) {
    const int64_t h = d.num_heads[t];
    if (t >= d.num_tensors) {
      BASP_CHECK_ARG(h == 0, "num_heads[", t, "] (", h, ") must be 0: only ", d.num_tensors, " tensors");
      continue;
    }
    BASP_CHECK_ARG(h > 0, "num_heads[", t, "] (", h, ") must be positive");
    BASP_CHECK_ARG(h % group_size == 0, "num_heads[", t, "] (", h, ") is not divisible by group size (", group_size,
                   ")");
    spec.num_heads.push_back(h);
  }
  return spec;
}

ExchangePlan make_exchange_plan(const ExchangeSpec& spec, int32_t group_size, int32_t position,
                                int64_t local_sequences) {
  BASP_CHECK_ARG(group_size > 0, "group size (", group_size, ") must be positive");
  BASP_CHECK_ARG(position >= 0 && position < group_size, "position (", position, ") is outside 0..", group_size - 1);
  BASP_CHECK_ARG(local_sequences > 0, "local sequences (", local_sequences, ") must be positive");
  ExchangePlan p;
  p.spec = spec;
  p.group_size = group_size;
  p.position = position;
  p.local_sequences = local_sequences;
  for (int64_t heads : spec.num_heads) {
    layout::Geometry g;
    g.layout = spec.layout;
    g.b_loc = local_sequences;
    g.s_loc = spec.seq_len / group_size;
    g.k = group_size;
    g.heads = heads;
    g.head_dim = spec.head_dim;
    g.elem = spec.elem_size;
    // Every product the index math forms must fit: the largest is the tensor's byte size.
    const int64_t row_elems = checked_mul(heads, spec.head_dim, "heads * head_dim");
    const int64_t row_bytes = checked_mul(row_elems, spec.elem_size, "row bytes");
    const int64_t rows = checked_mul(g.b_loc, g.s_loc, "local sequences * local tokens");
    const int64_t tensor_bytes = checked_mul(rows, row_bytes, "tensor bytes");
    (void)tensor_bytes;
    const int64_t others = group_size - 1;
    p.tensor_workspace_offset.push_back(p.bytes_sent);
    const int64_t sent = checked_mul(others, g.chunk_bytes(), "bytes sent");
    p.bytes_sent = checked_add(p.bytes_sent, sent, "bytes sent");
    p.tensors.push_back(g);
  }
  return p;
}

}  // namespace basp::plan
