// A bit-exact scatter + gather through a plan, for the reliability tests: inputs are a function of global
// (tensor, sequence, token, head, dim), outputs are poisoned first, the scatter output must equal the function
// and the gather must restore the input. BSHD, one byte per element; plain index formulas, not the library's.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "basp/basp.h"
#include "pattern.h"

namespace basp::test {

// The descriptor the reliability tests exchange: BSHD, byte elements (what the checks below assume), tensor 0 with
// 2 * ranks heads and the others with `ranks` heads, so every group size up to `ranks` divides them.
inline basp_plan_desc_t byte_bshd_desc(int64_t seq_len, int64_t head_dim, int32_t num_tensors, int64_t ranks) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BYTE;
  d.seq_len = seq_len;
  d.head_dim = head_dim;
  d.num_tensors = num_tensors;
  for (int32_t t = 0; t < num_tensors; ++t) d.num_heads[t] = (t == 0 ? 2 : 1) * ranks;
  return d;
}

struct ExchangeBuffers {
  std::vector<std::vector<uint8_t>> seq, head, back;
};

// Fills inputs and poisons outputs for `plan` of `comm` with byte elements and BSHD layout.
inline ExchangeBuffers make_buffers(basp_comm_t comm, const basp_plan_desc_t& d, uint64_t seed) {
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  if (basp_comm_query(comm, -1, d.seq_len, &me) != BASP_SUCCESS || me.group_size <= 0) return {};
  ExchangeBuffers x;
  const int64_t k = me.group_size;
  const int64_t s_loc = d.seq_len / k;
  for (int32_t t = 0; t < d.num_tensors; ++t) {
    const int64_t h = d.num_heads[t];
    const auto bytes = static_cast<size_t>(me.num_sequences * s_loc * h * d.head_dim);
    std::vector<uint8_t> in(bytes);
    for (int64_t b = 0; b < me.num_sequences; ++b)
      for (int64_t s = 0; s < s_loc; ++s)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t e = 0; e < d.head_dim; ++e)
            in[static_cast<size_t>(((b * s_loc + s) * h + hh) * d.head_dim + e)] =
                pattern_byte(seed, t, me.first_sequence + b, me.token_begin + s, hh, e, 0);
    x.seq.push_back(in);
    x.head.emplace_back(bytes, kPoison);
    x.back.emplace_back(bytes, kPoison);
  }
  return x;
}

// Whether the scatter output holds exactly the rank's heads of every token of its group's sequences.
// `me` is basp_comm_query's answer for the calling rank (with d.seq_len).
inline bool head_output_exact(const basp_rank_info_t& me, const basp_plan_desc_t& d, uint64_t seed,
                              const ExchangeBuffers& x) {
  const int64_t k = me.group_size;
  for (int32_t t = 0; t < d.num_tensors; ++t) {
    const int64_t hk = d.num_heads[t] / k;
    for (int64_t b = 0; b < me.num_sequences; ++b)
      for (int64_t s = 0; s < d.seq_len; ++s)
        for (int64_t hh = 0; hh < hk; ++hh)
          for (int64_t e = 0; e < d.head_dim; ++e) {
            const uint8_t want = pattern_byte(seed, t, me.first_sequence + b, s, me.group_position * hk + hh, e, 0);
            if (x.head[t][static_cast<size_t>(((b * d.seq_len + s) * hk + hh) * d.head_dim + e)] != want) return false;
          }
  }
  return true;
}

inline bool head_output_exact(basp_comm_t comm, const basp_plan_desc_t& d, uint64_t seed, const ExchangeBuffers& x) {
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  if (basp_comm_query(comm, -1, d.seq_len, &me) != BASP_SUCCESS) return false;
  return head_output_exact(me, d, seed, x);
}

// Scatter then gather; true when both statuses are BASP_SUCCESS and the data is exact.
inline bool exchange_is_exact(basp_comm_t comm, basp_plan_t plan, const basp_plan_desc_t& d, uint64_t seed) {
  ExchangeBuffers x = make_buffers(comm, d, seed);
  // No buffers: the comm could not be queried (a comm broken by an earlier failure). Not exact, and nothing to index.
  if (x.seq.size() != static_cast<size_t>(d.num_tensors)) return false;
  std::vector<const void*> in;
  std::vector<void*> out, back;
  std::vector<const void*> head_in;
  for (int32_t t = 0; t < d.num_tensors; ++t) {
    in.push_back(x.seq[t].data());
    out.push_back(x.head[t].data());
    head_in.push_back(x.head[t].data());
    back.push_back(x.back[t].data());
  }
  if (basp_scatter(plan, in.data(), out.data(), nullptr) != BASP_SUCCESS) return false;
  if (!head_output_exact(comm, d, seed, x)) return false;
  if (basp_gather(plan, head_in.data(), back.data(), nullptr) != BASP_SUCCESS) return false;
  return x.back == x.seq;
}

}  // namespace basp::test
