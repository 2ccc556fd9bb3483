// The splits and the GQA routing of docs/design.md ("Uneven shapes"), written out for the tests independently of
// the library's arithmetic (common/split.h, layout/geometry.h): tensor_split's sizes and the KV ranges of the
// query split.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace basp::test {

// tensor_split of `items` over `parts`: bounds[j] .. bounds[j + 1] for position j.
inline std::vector<int64_t> split_bounds(int64_t items, int64_t parts) {
  std::vector<int64_t> b{0};
  for (int64_t j = 0; j < parts; ++j) b.push_back(b.back() + items / parts + (j < items % parts ? 1 : 0));
  return b;
}

struct HeadRange {
  int64_t begin = 0, end = 0;
  bool holds(int64_t h) const { return begin <= h && h < end; }
};

// The heads of a tensor of `heads` heads that position j holds: its own split (split_heads == heads), or the KV
// heads [a / r, (b - 1) / r] of query heads [a, b) of the split of `split_heads` (none when a == b).
inline std::vector<HeadRange> head_ranges(int64_t heads, int64_t split_heads, int64_t parts) {
  const std::vector<int64_t> q = split_bounds(split_heads, parts);
  std::vector<HeadRange> out;
  const int64_t r = split_heads / heads;
  for (int64_t j = 0; j < parts; ++j) {
    if (r == 1) {
      out.push_back({q[j], q[j + 1]});  // tensor_split: an empty range sits where the next would start
    } else if (q[j] == q[j + 1]) {
      out.push_back({0, 0});
    } else {
      out.push_back({q[j] / r, (q[j + 1] - 1) / r + 1});
    }
  }
  return out;
}

// A small integer written as FP16 or BF16 bits (exact: |v| < 2048 for FP16, < 256 for BF16), FP32 or FP64 bytes.
inline uint16_t small_int_half(int32_t v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  uint32_t a = static_cast<uint32_t>(v < 0 ? -v : v);
  int32_t e = 0;
  while ((a >> (e + 1)) != 0) ++e;  // a in [2^e, 2^(e+1))
  const uint32_t mantissa = (a << (10 - e)) & 0x3ffu;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mantissa);
}
inline uint16_t small_int_bf16(int32_t v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  uint32_t a = static_cast<uint32_t>(v < 0 ? -v : v);
  int32_t e = 0;
  while ((a >> (e + 1)) != 0) ++e;
  const uint32_t mantissa = (a << (7 - e)) & 0x7fu;
  return static_cast<uint16_t>(sign | ((e + 127) << 7) | mantissa);
}

// The test's own view of a tensor's geometry: the token bounds and head ranges from the formulas above, and the
// element offsets of both sides written out (only the plain fields of `Geo` are read: layout, b_loc, seq_len, k,
// heads, split_heads, head_dim, elem).
template <typename Geo>
struct GeometryRef {
  Geo g;
  std::vector<int64_t> tok;
  std::vector<HeadRange> heads;
  explicit GeometryRef(const Geo& geom)
      : g(geom), tok(split_bounds(geom.seq_len, geom.k)), heads(head_ranges(geom.heads, geom.split_heads, geom.k)) {}
  int64_t tc(int64_t j) const { return tok[j + 1] - tok[j]; }
  int64_t hc(int64_t j) const { return heads[j].end - heads[j].begin; }
  bool token_major() const { return g.layout == 1; /* BASP_LAYOUT_SBHD; THD is BSHD with one sequence */ }
  // Elements: position l's sequence-sharded tensor at (b, local token s, head h, d).
  int64_t seq_index(int64_t l, int64_t b, int64_t s, int64_t h, int64_t d) const {
    const int64_t row = token_major() ? s * g.b_loc + b : b * tc(l) + s;
    return (row * g.heads + h) * g.head_dim + d;
  }
  // Position m's head-sharded tensor at (b, global token s, local head i, d).
  int64_t head_index(int64_t m, int64_t b, int64_t s, int64_t i, int64_t d) const {
    const int64_t row = token_major() ? s * g.b_loc + b : b * g.seq_len + s;
    return (row * hc(m) + i) * g.head_dim + d;
  }
  int64_t seq_bytes(int64_t l) const { return g.b_loc * tc(l) * g.heads * g.head_dim * g.elem; }
  int64_t head_bytes(int64_t m) const { return g.b_loc * g.seq_len * hc(m) * g.head_dim * g.elem; }
};

// Writes the small integer v as one element of a summable dtype (FP16, BF16, FP32, FP64) at p.
inline void write_small_int(int32_t dtype, void* p, int32_t v) {
  if (dtype == 3 /* BASP_DTYPE_FP16 */ || dtype == 4 /* BASP_DTYPE_BF16 */) {
    const uint16_t x = dtype == 3 ? small_int_half(v) : small_int_bf16(v);
    std::memcpy(p, &x, 2);
  } else if (dtype == 5 /* BASP_DTYPE_FP32 */) {
    const auto x = static_cast<float>(v);
    std::memcpy(p, &x, 4);
  } else {
    const auto x = static_cast<double>(v);
    std::memcpy(p, &x, 8);
  }
}

}  // namespace basp::test
