#include "layout/host_copy.h"

#include <cstring>

namespace basp::layout {
namespace {

enum class Side { kSeq, kHead, kWire };

inline int64_t offset(const Geometry& g, Side side, int64_t r, int64_t j) {
  switch (side) {
    case Side::kSeq: return g.seq_row_offset(r, j);
    case Side::kHead: return g.head_row_offset(r, j);
    case Side::kWire: break;
  }
  return g.wire_row_offset(r);
}

// Copies rows [0, rows) of peer j from one side to the other, one memcpy per run of rows that are contiguous
// on both sides. Rows are contiguous on the sequence side only when K = 1; runs never cross a head-side block.
void copy_rows(const Geometry& g, Side from, const std::byte* src, Side to, std::byte* dst, int64_t j) {
  const int64_t rb = g.row_bytes();
  const int64_t rows = g.rows();
  if (rows == 0 || rb == 0) return;
  int64_t run_src = offset(g, from, 0, j);
  int64_t run_dst = offset(g, to, 0, j);
  int64_t run_len = 1;
  for (int64_t r = 1; r < rows; ++r) {
    const int64_t s = offset(g, from, r, j);
    const int64_t d = offset(g, to, r, j);
    if (s == run_src + run_len * rb && d == run_dst + run_len * rb) {
      ++run_len;
      continue;
    }
    std::memcpy(dst + run_dst, src + run_src, static_cast<size_t>(run_len * rb));
    run_src = s;
    run_dst = d;
    run_len = 1;
  }
  std::memcpy(dst + run_dst, src + run_src, static_cast<size_t>(run_len * rb));
}

}  // namespace

void pack_seq_rows(const Geometry& g, const std::byte* seq, std::byte* wire, int64_t j) {
  copy_rows(g, Side::kSeq, seq, Side::kWire, wire, j);
}
void unpack_seq_rows(const Geometry& g, const std::byte* wire, std::byte* seq, int64_t j) {
  copy_rows(g, Side::kWire, wire, Side::kSeq, seq, j);
}
void copy_seq_to_head(const Geometry& g, const std::byte* seq, std::byte* head, int64_t j) {
  copy_rows(g, Side::kSeq, seq, Side::kHead, head, j);
}
void copy_head_to_seq(const Geometry& g, const std::byte* head, std::byte* seq, int64_t j) {
  copy_rows(g, Side::kHead, head, Side::kSeq, seq, j);
}

}  // namespace basp::layout
