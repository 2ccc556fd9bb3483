// Whole tensors of test data for end-to-end exchange checks: what rank l of a group holds before a scatter (its
// sequence-sharded shard) and must hold after it (its head-sharded slice), as functions of the global
// coordinates (tensor, sequence, token, head, dim) through pattern_byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "layout/geometry.h"
#include "layout_reference.h"
#include "pattern.h"

namespace basp::test {

// Rank l's sequence-sharded tensor t: element (b, token, h, d) of the global tensor, tokens l*S/K .. (l+1)*S/K-1.
inline std::vector<std::byte> seq_input(uint64_t seed, const layout::Geometry& g, int32_t t, int64_t l) {
  std::vector<std::byte> s(static_cast<size_t>(g.seq_tensor_bytes(0)));
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t tok = 0; tok < s_loc(g); ++tok)
      for (int64_t h = 0; h < g.heads; ++h)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            s[static_cast<size_t>(seq_index(g, b, tok, h, d) * g.elem + e)] =
                std::byte{pattern_byte(seed, t, b, l * s_loc(g) + tok, h, d, e)};
  return s;
}

// What rank l's head-sharded tensor t must hold after the scatter: every token, heads l*H/K .. (l+1)*H/K-1.
inline std::vector<std::byte> head_expected(uint64_t seed, const layout::Geometry& g, int32_t t, int64_t l) {
  std::vector<std::byte> s(static_cast<size_t>(g.seq_tensor_bytes(0)));
  const int64_t hk = g.heads / g.k;
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t tok = 0; tok < s_loc(g) * g.k; ++tok)
      for (int64_t h = 0; h < hk; ++h)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            s[static_cast<size_t>(head_index(g, b, tok, h, d) * g.elem + e)] =
                std::byte{pattern_byte(seed, t, b, tok, l * hk + h, d, e)};
  return s;
}

}  // namespace basp::test
