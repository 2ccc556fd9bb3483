// Index math of the redistribution, shared by the host copies, the CUDA kernels and the unit tests.
//
// One tensor of one exchange, seen from the rank at position `me` of a group of K positions. Tokens of each
// sequence and query heads are split over the positions by tensor_split's rule (common/split.h): position j holds
// tokens [tok_begin(j), tok_begin(j + 1)) on the sequence-sharded side and heads [head_begin(j), head_end(j)) on the
// head-sharded side. A query-like tensor's heads follow their own split; a key/value tensor's follow the split of
// the query heads it serves (split_heads = Hq, ratio r = Hq / H): the position holding query heads [a, b) holds KV
// heads [a / r, (b - 1) / r], so a KV head may be held by several positions (replicated) and ranges may overlap.
//
//   sequence-sharded on position j  [b_loc][S_j][H][D]     (BSHD, THD with b_loc = 1)  or  [S_j][b_loc][H][D]  (SBHD)
//   head-sharded on position j      [b_loc][S][H_j][D]     (BSHD, THD)                 or  [S][b_loc][H_j][D]  (SBHD)
//
// The unit of movement is a *row*: the heads one position holds of one (sequence, token) pair. The chunk that
// sequence position s exchanges with head position h has seq_rows(s) = b_loc * S_s rows of head_row_bytes(h)
// bytes, enumerated in the layout's order of (sequence, token), so that row r means the same thing on both sides:
//   - in s's sequence-sharded tensor, row r of h's heads starts at r * H * D + head_begin(h) * D elements;
//   - in h's head-sharded tensor, s's rows form contiguous blocks: b_loc blocks of S_s rows, S rows apart, from
//     token tok_begin(s) (BSHD, THD), or one block of b_loc * S_s rows from row tok_begin(s) * b_loc (SBHD);
//   - on the wire (a packed chunk), row r starts at r * head_row_bytes(h).
// THD is BSHD with b_loc = 1 and S = the T tokens of the call's stream.
//
// A geometry may describe one head chunk of an exchange (plan/head_chunks.h; chunk_count > 1): it then moves, per
// position h, only the heads [moved(h).begin, moved(h).end) inside h's heads, in rows of moved_row_bytes(h) bytes;
// h's head-sharded tensor keeps its whole rows (head_row_bytes(h) apart), the moved heads moved_skip_bytes(h)
// into each. Chunk 0 of 1 moves every head: moved(h) is [head_begin(h), head_end(h)). A tensor marked
// kChunkAtEnds (a query-like tensor with fewer heads than its plan's chunk basis) moves every head of h in the
// scatter's first chunk and the gather's last, none in the others.
#pragma once

#include <cstdint>

#include "basp/basp.h"
#include "common/host_device.h"
#include "common/split.h"

namespace basp::layout {

// Heads [begin, end) of one tensor, in its own numbering.
struct HeadSpan {
  int64_t begin = 0;
  int64_t end = 0;
  BASP_HOST_DEVICE int64_t size() const { return end - begin; }
  BASP_HOST_DEVICE bool empty() const { return end <= begin; }
  BASP_HOST_DEVICE bool operator==(const HeadSpan& o) const { return begin == o.begin && end == o.end; }
};

struct Geometry {
  int32_t layout = BASP_LAYOUT_BSHD;  // basp_layout_t
  int32_t chunk_index = 0;            // the head chunk this geometry moves: chunk_index of chunk_count ... (here,
                                      // in the padding after `layout`: a whole exchange copies its geometries often)
  int64_t b_loc = 0;                  // sequences the group owns (THD: 1)
  int64_t seq_len = 0;                // S: tokens of each sequence (THD: T of this call)
  int64_t k = 0;                      // group size
  int64_t me = 0;                     // the position this geometry is seen from
  int64_t heads = 0;                  // H of this tensor
  int64_t split_heads = 0;            // the head count whose split the heads follow: H, or Hq for a KV tensor
  int64_t head_dim = 0;               // D
  int64_t elem = 0;                   // bytes per element
  int32_t chunk_count = 1;
  int32_t chunk_flags = 0;  // ... of a gather (kChunkGather) or a scatter; kChunkAtEnds: the tensor's heads move
                            // all at the ends. Chunk 0 of 1 is the whole exchange, whatever the flags.

  // chunk_flags: a gather's head chunk (else a scatter's).
  static constexpr int32_t kChunkGather = 1;
  // chunk_flags: every head of a position moves in the scatter's first chunk (0) and the gather's last (C - 1),
  // none in the others; set by the plan (plan/head_chunks.h) on a query-like tensor below its chunk basis.
  static constexpr int32_t kChunkAtEnds = 2;

  // --- splits ---
  BASP_HOST_DEVICE int64_t tok_begin(int64_t j) const { return detail::split_begin(seq_len, k, j); }
  BASP_HOST_DEVICE int64_t tok_count(int64_t j) const { return detail::split_count(seq_len, k, j); }
  BASP_HOST_DEVICE int64_t ratio() const { return split_heads / heads; }
  // The split heads (query heads for a KV tensor) of position j: [split_begin(j), split_begin(j + 1)).
  BASP_HOST_DEVICE int64_t split_begin(int64_t j) const { return detail::split_begin(split_heads, k, j); }
  BASP_HOST_DEVICE int64_t head_begin(int64_t j) const {
    const int64_t a = split_begin(j);
    if (split_heads == heads) return a;
    return a < split_begin(j + 1) ? a / ratio() : 0;
  }
  BASP_HOST_DEVICE int64_t head_end(int64_t j) const {
    const int64_t b = split_begin(j + 1);
    if (split_heads == heads) return b;
    return split_begin(j) < b ? (b - 1) / ratio() + 1 : 0;
  }
  BASP_HOST_DEVICE int64_t heads_of(int64_t j) const { return head_end(j) - head_begin(j); }
  // The positions holding head h (0 <= h < H): first_holder(h) .. last_holder(h), every one of them in between.
  BASP_HOST_DEVICE int64_t first_holder(int64_t h) const { return detail::split_position(split_heads, k, h * ratio()); }
  BASP_HOST_DEVICE int64_t last_holder(int64_t h) const {
    return detail::split_position(split_heads, k, (h + 1) * ratio() - 1);
  }

  // --- the heads one execute moves ---
  BASP_HOST_DEVICE bool whole() const { return chunk_count == 1; }
  // Position j's heads this execute moves (to j in a scatter, from j in a gather): for a head chunk, its query
  // heads of j by the split rule, and a key/value head with the first chunk of j reading it (scatter) or the last
  // one (gather) (plan/head_chunks.h); kChunkAtEnds: every head of j in the scatter's chunk 0 and the gather's
  // chunk C - 1, none in the others; the whole exchange: every head of j.
  BASP_HOST_DEVICE HeadSpan moved(int64_t j) const {
    if (whole()) return {head_begin(j), head_end(j)};
    const bool gather = (chunk_flags & kChunkGather) != 0;
    if (chunk_flags & kChunkAtEnds) {
      if (chunk_index != (gather ? chunk_count - 1 : 0)) return {};
      return {head_begin(j), head_end(j)};
    }
    const int64_t a = split_begin(j);
    const int64_t b = split_begin(j + 1);
    const int64_t qb = a + detail::split_begin(b - a, chunk_count, chunk_index);
    const int64_t qe = a + detail::split_begin(b - a, chunk_count, chunk_index + 1);
    if (qe <= qb) return {};
    const int64_t r = ratio();
    int64_t lo = qb / r;
    int64_t hi = (qe - 1) / r + 1;
    // The head of the chunk's first query head is read by j's previous chunk too unless that query head starts
    // the head: the scatter moved it there. The head of its last query head is read by j's next chunk too: the
    // gather moves it there.
    if (!gather && qb > a && qb % r != 0) ++lo;
    if (gather && qe < b && qe % r != 0) --hi;
    if (lo >= hi) return {};
    return {lo, hi};
  }
  BASP_HOST_DEVICE int64_t moved_row_bytes(int64_t j) const { return moved(j).size() * dim_bytes(); }
  // Bytes from the start of a row of j's head-sharded tensor to the moved heads (0 when none move).
  BASP_HOST_DEVICE int64_t moved_skip_bytes(int64_t j) const {
    const HeadSpan m = moved(j);
    return m.empty() ? 0 : (m.begin - head_begin(j)) * dim_bytes();
  }
  // The part of the chunk sequence position s exchanges with head position h (chunk_bytes(s, h)) that this
  // geometry moves: its bytes, seq_rows(s) rows of moved_row_bytes(h), and where they start inside the whole
  // chunk's bytes. The pieces of the C head chunks of one direction are disjoint and lie inside the whole chunk's
  // bytes (the heads of h move once per direction), so the chunks of a round may share a workspace. Whole: the
  // chunk, at 0.
  BASP_HOST_DEVICE int64_t moved_bytes(int64_t s, int64_t h) const { return seq_rows(s) * moved_row_bytes(h); }
  BASP_HOST_DEVICE int64_t moved_offset(int64_t s, int64_t h) const { return seq_rows(s) * moved_skip_bytes(h); }
  // The head chunk in which holder q of head h sends it in a gather: the last chunk of q whose query heads read h
  // (0 for the whole exchange; not for a kChunkAtEnds tensor, which holds no head twice).
  BASP_HOST_DEVICE int64_t gather_chunk_of(int64_t q, int64_t h) const {
    const int64_t a = split_begin(q);
    const int64_t n = split_begin(q + 1) - a;
    const int64_t last = ((h + 1) * ratio() < a + n ? (h + 1) * ratio() : a + n) - 1;
    return detail::split_position(n, chunk_count, last - a);
  }
  // The gather's head chunk that brings head h's last contribution, where its holders' contributions are summed.
  BASP_HOST_DEVICE int64_t gather_sum_chunk(int64_t h) const {
    int64_t done = 0;
    for (int64_t q = first_holder(h); q <= last_holder(h); ++q) {
      const int64_t c = gather_chunk_of(q, h);
      done = done > c ? done : c;
    }
    return done;
  }
  // The same tensor's geometry for head chunk `index` of `count` in a gather (true) or scatter (kChunkAtEnds kept).
  BASP_HOST_DEVICE Geometry chunk(int32_t index, int32_t count, bool gather) const {
    Geometry g = *this;
    g.chunk_index = index;
    g.chunk_count = count;
    g.chunk_flags = (chunk_flags & kChunkAtEnds) | (gather ? kChunkGather : 0);
    return g;
  }

  // --- sizes ---
  BASP_HOST_DEVICE int64_t dim_bytes() const { return head_dim * elem; }
  BASP_HOST_DEVICE int64_t seq_rows(int64_t j) const { return b_loc * tok_count(j); }
  BASP_HOST_DEVICE int64_t seq_row_bytes() const { return heads * dim_bytes(); }
  BASP_HOST_DEVICE int64_t head_row_bytes(int64_t j) const { return heads_of(j) * dim_bytes(); }
  BASP_HOST_DEVICE int64_t seq_tensor_bytes(int64_t j) const { return seq_rows(j) * seq_row_bytes(); }
  BASP_HOST_DEVICE int64_t head_tensor_bytes(int64_t j) const { return b_loc * seq_len * head_row_bytes(j); }
  // The chunk sequence position s exchanges with head position h.
  BASP_HOST_DEVICE int64_t chunk_bytes(int64_t s, int64_t h) const { return seq_rows(s) * head_row_bytes(h); }

  // --- offsets ---
  // Sequence side of `me`: byte offset of row r's heads of position j.
  BASP_HOST_DEVICE int64_t seq_row_offset(int64_t r, int64_t j) const {
    return r * seq_row_bytes() + head_begin(j) * dim_bytes();
  }
  // Head side of position h: s's rows come in num_blocks() contiguous blocks of block_rows(s) rows.
  BASP_HOST_DEVICE bool token_major() const { return layout == BASP_LAYOUT_SBHD; }
  BASP_HOST_DEVICE int64_t block_rows(int64_t s) const { return token_major() ? seq_rows(s) : tok_count(s); }
  BASP_HOST_DEVICE int64_t num_blocks() const { return token_major() ? 1 : b_loc; }
  BASP_HOST_DEVICE int64_t block_stride_rows() const { return token_major() ? 0 : seq_len; }
  // The head-side row where s's rows start.
  BASP_HOST_DEVICE int64_t block_start_row(int64_t s) const {
    return token_major() ? tok_begin(s) * b_loc : tok_begin(s);
  }
  // Head side of position h: byte offset of row r of sequence position s's chunk.
  BASP_HOST_DEVICE int64_t head_row_offset(int64_t h, int64_t s, int64_t r) const {
    const int64_t rows =
        token_major() ? tok_begin(s) * b_loc + r : (r / tok_count(s)) * seq_len + tok_begin(s) + r % tok_count(s);
    return rows * head_row_bytes(h);
  }

  // --- properties ---
  // The textbook shape: K divides S and H, heads follow their own split. Every chunk then has the same size.
  BASP_HOST_DEVICE bool uniform() const { return split_heads == heads && heads % k == 0 && seq_len % k == 0; }
  // Whether some head is held by several positions (a gather must sum it).
  BASP_HOST_DEVICE bool replicated() const {
    if (split_heads == heads) return false;
    for (int64_t j = 1; j < k; ++j) {
      const int64_t a = split_begin(j);
      if (a < split_begin(j + 1) && a % ratio() != 0) return true;
    }
    return false;
  }

  // The same tensor seen from position p.
  BASP_HOST_DEVICE Geometry seen_from(int64_t p) const {
    Geometry g = *this;
    g.me = p;
    return g;
  }

  // The tensor's shapes on position `me`, in the layout's own order: 4 dimensions (BSHD, SBHD) or 3 (THD).
  BASP_HOST_DEVICE int32_t ndim() const { return layout == BASP_LAYOUT_THD ? 3 : 4; }
  BASP_HOST_DEVICE void seq_sharded_shape(int64_t* dims) const { shape(dims, tok_count(me), heads); }
  BASP_HOST_DEVICE void head_sharded_shape(int64_t* dims) const { shape(dims, seq_len, heads_of(me)); }

 private:
  BASP_HOST_DEVICE void shape(int64_t* dims, int64_t tokens, int64_t h) const {
    if (layout == BASP_LAYOUT_THD) {
      dims[0] = tokens;
      dims[1] = h;
      dims[2] = head_dim;
      dims[3] = 0;
      return;
    }
    const bool bshd = layout == BASP_LAYOUT_BSHD;
    dims[0] = bshd ? b_loc : tokens;
    dims[1] = bshd ? tokens : b_loc;
    dims[2] = h;
    dims[3] = head_dim;
  }
};

// A whole exchange copies its geometries often: keep them at 80 bytes (the chunk fields fill the padding).
static_assert(sizeof(Geometry) == 80, "layout::Geometry grew");

}  // namespace basp::layout
