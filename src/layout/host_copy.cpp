#include "layout/host_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>

#include "layout/sum_rows.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define BASP_HAVE_SSE2_STREAM 1
#endif

namespace basp::layout {

void copy_streaming(std::byte* dst, const std::byte* src, size_t n) {
#ifdef BASP_HAVE_SSE2_STREAM
  if (((reinterpret_cast<uintptr_t>(dst) | n) & 15) == 0) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    for (; i < n; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void stream_fence() {
#ifdef BASP_HAVE_SSE2_STREAM
  _mm_sfence();
#endif
}

namespace {

inline void copy_bytes(std::byte* dst, const std::byte* src, int64_t n, bool streaming) {
  if (streaming) {
    copy_streaming(dst, src, static_cast<size_t>(n));
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
}

// A head chunk's pieces shorter than this take ordinary stores even where the caller asks for streaming ones: on
// the CI VM (basp_micro_layout BM_scatter_rows_chunks, 64 MiB, K = 4) non-temporal stores of 512- and 256-byte
// pieces took 1.3-1.6x the CPU time of ordinary ones, while 1 KiB pieces and whole rows still gained from them.
constexpr int64_t kMinStreamingPiece = 1024;

// `streaming` for the copies of g: a whole exchange as asked; a head chunk only when every piece it moves is at
// least kMinStreamingPiece bytes (positions moving nothing aside).
bool streams(const Geometry& g, bool streaming) {
  if (!streaming || g.whole()) return streaming;
  for (int64_t j = 0; j < g.k; ++j) {
    const int64_t rb = g.moved_row_bytes(j);
    if (rb > 0 && rb < kMinStreamingPiece) return false;
  }
  return true;
}

// Copies rows [0, rows) from src(r) to dst(r), `rb` bytes each, one memcpy per run of rows contiguous on both sides.
template <typename Dst, typename Src>
void copy_runs(int64_t rows, int64_t rb, Dst dst, Src src) {
  if (rows == 0 || rb == 0) return;
  std::byte* run_dst = dst(0);
  const std::byte* run_src = src(0);
  int64_t run_len = 1;
  for (int64_t r = 1; r < rows; ++r) {
    std::byte* d = dst(r);
    const std::byte* s = src(r);
    if (s == run_src + run_len * rb && d == run_dst + run_len * rb) {
      ++run_len;
      continue;
    }
    std::memcpy(run_dst, run_src, static_cast<size_t>(run_len * rb));
    run_src = s;
    run_dst = d;
    run_len = 1;
  }
  std::memcpy(run_dst, run_src, static_cast<size_t>(run_len * rb));
}

// Rows per visit of one position when each position is its own write stream: about a 4 KiB page (scatter);
// measured on the CI machine, 1 KiB rows, K = 8: scatter 10.1 ms with single rows, 8.5 ms with 4-row blocks
// (memcpy 7.6 ms).
int64_t stream_block(const Geometry& g) {
  int64_t rb = 0;
  for (int64_t j = 0; j < g.k; ++j) rb = rb > g.head_row_bytes(j) ? rb : g.head_row_bytes(j);
  if (rb <= 0 || rb >= 4096) return 1;
  const int64_t b = 4096 / rb;
  return b > 16 ? 16 : b;
}

}  // namespace

namespace {

// What one row-major pass needs of position j, worked out once per call instead of once per row (the splits cost
// a few divisions each): its heads, its row bytes, whether its first and last heads are shared with neighbours,
// and where its rows start on the head side.
struct Peer {
  int64_t lo = 0, hi = 0;  // its heads [lo, hi) that move
  int64_t rb = 0;          // bytes of its rows that move
  int64_t stride = 0;      // bytes of its rows in its head-sharded tensor
  bool shared_lo = false, shared_hi = false;
  int64_t tb = 0, tc = 0;  // `me`'s tokens: where they start and how many (head side of position j)
  std::byte* base = nullptr;
  bool tensor = false;

  Peer(const Geometry& g, int64_t j, const RowPlace& place) : base(place.base), tensor(place.tensor) {
    const HeadSpan m = g.moved(j);
    lo = m.begin;
    hi = m.end;
    rb = m.size() * g.dim_bytes();
    stride = g.head_row_bytes(j);
    if (tensor && rb > 0) base += g.moved_skip_bytes(j);
    const bool may_share = g.split_heads != g.heads && hi > lo;
    shared_lo = may_share && g.first_holder(lo) != g.last_holder(lo);
    shared_hi = may_share && hi - 1 != lo && g.first_holder(hi - 1) != g.last_holder(hi - 1);
    tb = g.tok_begin(g.me);
    tc = g.tok_count(g.me);
  }
  // Row r of `me`'s chunk in position j's head tensor, or in the packed chunk.
  std::byte* row(const Geometry& g, int64_t r) const {
    if (!tensor) return base + r * rb;
    const int64_t rows = g.token_major() ? tb * g.b_loc + r : (r / tc) * g.seq_len + tb + r % tc;
    return base + rows * stride;
  }
};

// Positions are worked out into a small array on the stack when the group is not larger (no allocation on the
// execute path), and on the fly otherwise.
constexpr int64_t kPeerCache = 64;

template <typename Body>
void with_peers(const Geometry& g, const RowPlace* places, Body body) {
  if (g.k <= kPeerCache) {
    alignas(Peer) unsigned char storage[kPeerCache * sizeof(Peer)];
    Peer* peers = reinterpret_cast<Peer*>(storage);
    for (int64_t j = 0; j < g.k; ++j) new (&peers[j]) Peer(g, j, places[j]);
    body([&](int64_t j) -> const Peer& { return peers[j]; });
    return;
  }
  body([&](int64_t j) { return Peer(g, j, places[j]); });
}

}  // namespace

void seq_to_place(const Geometry& g, const std::byte* seq, RowPlace place, int64_t j) {
  const Peer p(g, j, place);
  copy_runs(
      g.seq_rows(g.me), p.rb, [&](int64_t r) { return p.row(g, r); },
      [&](int64_t r) { return seq + r * g.seq_row_bytes() + p.lo * g.dim_bytes(); });
}

void place_to_seq(const Geometry& g, RowPlace place, std::byte* seq, int64_t j) {
  const Peer p(g, j, place);
  copy_runs(
      g.seq_rows(g.me), p.rb, [&](int64_t r) { return seq + r * g.seq_row_bytes() + p.lo * g.dim_bytes(); },
      [&](int64_t r) { return static_cast<const std::byte*>(p.row(g, r)); });
}

void scatter_rows(const Geometry& g, const std::byte* seq, const RowPlace* places, bool streaming_asked) {
  const bool streaming = streams(g, streaming_asked);
  const int64_t rows = g.seq_rows(g.me);
  const int64_t block = stream_block(g);
  const int64_t db = g.dim_bytes();
  with_peers(g, places, [&](auto peer) {
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
      const int64_t b1 = b0 + block < rows ? b0 + block : rows;
      for (int64_t j = 0; j < g.k; ++j) {
        const Peer& p = peer(j);
        if (p.rb == 0) continue;
        for (int64_t r = b0; r < b1; ++r) {
          copy_bytes(p.row(g, r), seq + r * g.seq_row_bytes() + p.lo * db, p.rb, streaming);
        }
      }
    }
  });
  if (streaming) stream_fence();
}

namespace {

// The sum of one replicated head over its holders (sum_rows.h's order and rounding), with the holders' pointers
// worked out once per (row, head) and the elements in chunks, so that the inner loops run over contiguous elements
// (and vectorise) instead of re-deriving every contribution's address per element. Bit-identical to
// sum_elements: each element gets the same additions in the same order.
void sum_head(int32_t dtype, unsigned char* dst, const unsigned char* const* src, int32_t n, int64_t count) {
  constexpr int64_t kChunk = 256;
  for (int64_t i0 = 0; i0 < count; i0 += kChunk) {
    const int64_t m = count - i0 < kChunk ? count - i0 : kChunk;
    if (dtype == BASP_DTYPE_FP64) {
      double acc[kChunk];
      std::memcpy(acc, src[0] + i0 * 8, static_cast<size_t>(m) * 8);
      for (int32_t c = 1; c < n; ++c) {
        double v[kChunk];
        std::memcpy(v, src[c] + i0 * 8, static_cast<size_t>(m) * 8);
        for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] + v[i];
      }
      std::memcpy(dst + i0 * 8, acc, static_cast<size_t>(m) * 8);
      continue;
    }
    float acc[kChunk];
    float v[kChunk];
    auto load = [&](const unsigned char* p, float* out) {
      if (dtype == BASP_DTYPE_FP32) {
        std::memcpy(out, p + i0 * 4, static_cast<size_t>(m) * 4);
        return;
      }
      uint16_t h[kChunk];
      std::memcpy(h, p + i0 * 2, static_cast<size_t>(m) * 2);
      if (dtype == BASP_DTYPE_FP16) {
        for (int64_t i = 0; i < m; ++i) out[i] = half_to_float(h[i]);
      } else {
        for (int64_t i = 0; i < m; ++i) out[i] = bf16_to_float(h[i]);
      }
    };
    load(src[0], acc);
    for (int32_t c = 1; c < n; ++c) {
      load(src[c], v);
      for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] + v[i];
    }
    if (dtype == BASP_DTYPE_FP32) {
      std::memcpy(dst + i0 * 4, acc, static_cast<size_t>(m) * 4);
      continue;
    }
    uint16_t h[kChunk];
    for (int64_t i = 0; i < m; ++i) h[i] = dtype == BASP_DTYPE_FP16 ? float_to_half(acc[i]) : float_to_bf16(acc[i]);
    std::memcpy(dst + i0 * 2, h, static_cast<size_t>(m) * 2);
  }
}

constexpr int32_t kMaxHolders = 64;  // holders of one head whose pointers fit on the stack; more: one at a time

// Where holder q's contribution to head h lies: in q's head-sharded tensor (places[q] a tensor), or in the packed
// piece of the chunk q sent it in (places[q] is the piece of the current chunk; the pieces of one position's chunks
// lie at seq_rows * moved_skip_bytes from the whole exchange's, ExchangePlan::workspace_offset).
struct Contribution {
  const std::byte* base = nullptr;  // row 0's element 0 of head h
  int64_t stride = 0;               // packed: bytes from one row to the next
  int64_t holder = -1;              // >= 0: in this holder's head-sharded tensor, rows as Geometry::head_row_offset
  const std::byte* row(const Geometry& g, int64_t r) const {
    return holder >= 0 ? base + g.head_row_offset(holder, g.me, r) : base + r * stride;
  }
};

Contribution contribution(const Geometry& g, const RowPlace& place, int64_t q, int64_t h) {
  Contribution c;
  if (place.tensor) {
    c.base = place.base + (h - g.head_begin(q)) * g.dim_bytes();
    c.holder = q;
    return c;
  }
  const Geometry sent = g.chunk(static_cast<int32_t>(g.gather_chunk_of(q, h)), g.chunk_count, true);
  const int64_t rows = g.seq_rows(g.me);
  c.base = place.base - rows * g.moved_skip_bytes(q) + rows * sent.moved_skip_bytes(q) +
           (h - sent.moved(q).begin) * g.dim_bytes();
  c.stride = sent.moved_row_bytes(q);
  return c;
}

// A gather's head chunk: the heads several positions hold whose last contribution this chunk brings, each summed
// over all its holders in ascending position as a whole gather sums it (the earlier chunks' contributions stay
// where they landed: the chunks of one direction use disjoint pieces, and the head-sharded inputs are the same).
void sum_chunk_heads(const Geometry& g, const RowPlace* places, std::byte* seq, int32_t dtype) {
  for (int64_t h = 0; h < g.heads; ++h) {
    const int64_t first = g.first_holder(h);
    const int64_t last = g.last_holder(h);
    if (first == last) continue;
    if (g.gather_sum_chunk(h) != g.chunk_index) continue;
    const auto n = static_cast<int32_t>(last - first + 1);
    if (n > kMaxHolders) {  // one contribution at a time, as the whole gather
      for (int64_t r = 0; r < g.seq_rows(g.me); ++r) {
        auto source = [&](int32_t c) {
          return reinterpret_cast<const unsigned char*>(contribution(g, places[first + c], first + c, h).row(g, r));
        };
        sum_elements(dtype, reinterpret_cast<unsigned char*>(seq + r * g.seq_row_bytes() + h * g.dim_bytes()), source,
                     n, g.head_dim);
      }
      continue;
    }
    Contribution from[kMaxHolders];
    for (int32_t c = 0; c < n; ++c) from[c] = contribution(g, places[first + c], first + c, h);
    for (int64_t r = 0; r < g.seq_rows(g.me); ++r) {
      const unsigned char* src[kMaxHolders];
      for (int32_t c = 0; c < n; ++c) src[c] = reinterpret_cast<const unsigned char*>(from[c].row(g, r));
      sum_head(dtype, reinterpret_cast<unsigned char*>(seq + r * g.seq_row_bytes() + h * g.dim_bytes()), src, n,
               g.head_dim);
    }
  }
}

}  // namespace

void gather_rows(const Geometry& g, const RowPlace* places, std::byte* seq, int32_t dtype, bool streaming_asked) {
  const bool streaming = streams(g, streaming_asked);
  const int64_t rows = g.seq_rows(g.me);
  const int64_t db = g.dim_bytes();
  with_peers(g, places, [&](auto peer) {
    bool any_shared = false;
    for (int64_t j = 0; j < g.k && !any_shared; ++j) any_shared = peer(j).shared_lo || peer(j).shared_hi;
    if (!any_shared) {  // nothing replicated: every position's heads are one copy per row
      for (int64_t r = 0; r < rows; ++r) {
        std::byte* out = seq + r * g.seq_row_bytes();
        for (int64_t j = 0; j < g.k; ++j) {
          const Peer& p = peer(j);
          if (p.rb > 0) copy_bytes(out + p.lo * db, p.row(g, r), p.rb, streaming);
        }
      }
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::byte* out = seq + r * g.seq_row_bytes();
      for (int64_t j = 0; j < g.k; ++j) {
        const Peer& p = peer(j);
        if (p.lo == p.hi) continue;
        const std::byte* in = p.row(g, r);
        const int64_t run_begin = p.lo + (p.shared_lo ? 1 : 0);
        const int64_t run_end = p.hi - (p.shared_hi ? 1 : 0);
        if (run_end > run_begin) {
          copy_bytes(out + run_begin * db, in + (run_begin - p.lo) * db, (run_end - run_begin) * db, streaming);
        }
        if (!g.whole()) continue;  // a head chunk sums its heads in sum_chunk_heads
        // A head several positions hold is summed once, in its first holder's turn, over all its holders.
        for (const int64_t h : {p.shared_lo ? p.lo : int64_t{-1}, p.shared_hi ? p.hi - 1 : int64_t{-1}}) {
          if (h < 0 || g.first_holder(h) != j) continue;
          const int64_t first = j;
          const auto n = static_cast<int32_t>(g.last_holder(h) - first + 1);
          auto source = [&](int32_t c) {
            const Peer& q = peer(first + c);
            return reinterpret_cast<const unsigned char*>(q.row(g, r) + (h - q.lo) * db);
          };
          auto* dst = reinterpret_cast<unsigned char*>(out + h * db);
          if (n > kMaxHolders) {
            sum_elements(dtype, dst, source, n, g.head_dim);
            continue;
          }
          const unsigned char* src[kMaxHolders];
          for (int32_t c = 0; c < n; ++c) src[c] = source(c);
          sum_head(dtype, dst, src, n, g.head_dim);
        }
      }
    }
    if (!g.whole()) sum_chunk_heads(g, places, seq, dtype);
  });
  if (streaming) stream_fence();
}

namespace {

// A head chunk's rows of sequence position s in the head-sharded tensor `head` of `me` <-> the packed chunk:
// moved_row_bytes(me) of each row, one copy per row (the rows are not contiguous in the tensor).
template <bool kToWire>
void copy_chunk_rows(const Geometry& g, std::byte* head, std::byte* wire, int64_t s, bool streaming_asked) {
  const bool streaming = streams(g, streaming_asked);
  const int64_t stride = g.head_row_bytes(g.me);
  const int64_t rb = g.moved_row_bytes(g.me);
  if (rb == 0) return;
  std::byte* first = head + g.moved_skip_bytes(g.me);
  for (int64_t b = 0; b < g.num_blocks(); ++b) {
    const int64_t start = g.block_start_row(s) + b * g.block_stride_rows();
    for (int64_t i = 0; i < g.block_rows(s); ++i) {
      std::byte* t = first + (start + i) * stride;
      std::byte* w = wire + (b * g.block_rows(s) + i) * rb;
      copy_bytes(kToWire ? w : t, kToWire ? t : w, rb, streaming);
    }
  }
  if (streaming) stream_fence();
}

}  // namespace

void pack_head_rows(const Geometry& g, const std::byte* head, std::byte* wire, int64_t s, bool streaming) {
  if (!g.whole()) return copy_chunk_rows<true>(g, const_cast<std::byte*>(head), wire, s, streaming);
  const int64_t rb = g.head_row_bytes(g.me);
  const int64_t block = g.block_rows(s) * rb;
  if (block == 0) return;
  for (int64_t b = 0; b < g.num_blocks(); ++b) {
    copy_bytes(wire + b * block, head + (g.block_start_row(s) + b * g.block_stride_rows()) * rb, block, streaming);
  }
  if (streaming) stream_fence();
}

void unpack_head_rows(const Geometry& g, const std::byte* wire, std::byte* head, int64_t s, bool streaming) {
  if (!g.whole()) return copy_chunk_rows<false>(g, head, const_cast<std::byte*>(wire), s, streaming);
  const int64_t rb = g.head_row_bytes(g.me);
  const int64_t block = g.block_rows(s) * rb;
  if (block == 0) return;
  for (int64_t b = 0; b < g.num_blocks(); ++b) {
    copy_bytes(head + (g.block_start_row(s) + b * g.block_stride_rows()) * rb, wire + b * block, block, streaming);
  }
  if (streaming) stream_fence();
}

}  // namespace basp::layout
