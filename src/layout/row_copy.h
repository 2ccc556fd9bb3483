// The body of the device pack/unpack kernels, as a BASP_HOST_DEVICE function: the CUDA kernel
// (layout/cuda/pack_kernels.cu) runs copy_tile() for every (tile, thread), and the unit tests run the very same
// function on the host over every (tile, thread) of a launch, so CI checks every offset the kernels use.
//
// One launch moves rows of all tensors of an exchange between their tensors and the packed workspace
// (layout/packed_workspace.h), in one of four ways:
//   scatter pack:   sequence-sharded -> wire      (side kSeq,  to_wire 1)
//   scatter unpack: wire -> head-sharded          (side kHead, to_wire 0)
//   gather pack:    head-sharded -> wire          (side kHead, to_wire 1)
//   gather unpack:  wire -> sequence-sharded      (side kSeq,  to_wire 0)
// A head chunk's geometry (layout/geometry.h, Geometry::moved) moves the moved heads of each row, as the host
// copies do (layout/host_copy.h): in the tensors, moved_skip_bytes into each row; in the workspace, the piece of
// each peer's slot at Geometry::moved_offset, so that the chunks of one round use disjoint bytes of it.
#pragma once

#include <cstdint>
#include <cstring>

#include "basp/basp.h"
#include "common/host_device.h"
#include "layout/geometry.h"
#include "layout/packed_workspace.h"
#include "layout/row_tiles.h"
#include "layout/sum_rows.h"

#if defined(__CUDA_ARCH__)
#define BASP_UNROLL _Pragma("unroll")
#else
#define BASP_UNROLL
#endif

namespace basp::layout {

enum class TensorSide : int32_t { kSeq = 0, kHead = 1 };

// Everything one launch needs, passed by value as the kernel argument (well under the 4 KiB limit).
struct RowCopyArgs {
  int32_t num_tensors = 0;
  int32_t side = 0;     // TensorSide of the tensors
  int32_t to_wire = 0;  // 1: tensors -> wire (pack); 0: wire -> tensors (unpack)
  int64_t num_tiles = 0;
  Geometry geom[BASP_MAX_TENSORS];
  RowTiling tiling[BASP_MAX_TENSORS];
  unsigned char* tensor[BASP_MAX_TENSORS] = {};
  unsigned char* wire = nullptr;
  PackedWorkspace workspace;
  // A device word that, when nonzero, makes the launch copy nothing (nullptr: always copy): the guard of a batch
  // plan's unpack, set by the tag check of its exchange (pack_kernels.h). The host copies ignore it.
  const uint32_t* skip = nullptr;
};

// Build-time knob (docs/gpu.md, "Tuning"): 1 gives the kernel's loads and stores the streaming (evict-first) hint.
#ifndef BASP_COPY_STREAMING
#define BASP_COPY_STREAMING 0
#endif

// A plain value of V bytes with V-byte alignment: the unit of one load and one store.
template <int V>
struct VecOf;
#if defined(__CUDACC__)
template <>
struct VecOf<16> {
  using type = uint4;
};
template <>
struct VecOf<8> {
  using type = uint2;
};
#else
template <>
struct VecOf<16> {
  struct alignas(16) type {
    uint32_t w[4];
  };
};
template <>
struct VecOf<8> {
  using type = uint64_t;
};
#endif
template <>
struct VecOf<4> {
  using type = uint32_t;
};
template <>
struct VecOf<2> {
  using type = uint16_t;
};
template <>
struct VecOf<1> {
  using type = uint8_t;
};

template <int V>
BASP_HOST_DEVICE typename VecOf<V>::type load_vec(const unsigned char* p) {
#if defined(__CUDA_ARCH__) && BASP_COPY_STREAMING
  return __ldcs(reinterpret_cast<const typename VecOf<V>::type*>(p));  // read once: evict first
#elif defined(__CUDA_ARCH__)
  return *reinterpret_cast<const typename VecOf<V>::type*>(p);
#else
  typename VecOf<V>::type v;
  std::memcpy(&v, p, V);
  return v;
#endif
}

template <int V>
BASP_HOST_DEVICE void store_vec(unsigned char* p, const typename VecOf<V>::type& v) {
#if defined(__CUDA_ARCH__) && BASP_COPY_STREAMING
  __stcs(reinterpret_cast<typename VecOf<V>::type*>(p), v);
#elif defined(__CUDA_ARCH__)
  *reinterpret_cast<typename VecOf<V>::type*>(p) = v;
#else
  std::memcpy(p, &v, V);
#endif
}

// Thread `thread` of tile `tile` of tensor t (tile counted inside the tensor), with V-byte accesses.
template <int V>
BASP_HOST_DEVICE void copy_tile_rows(const RowCopyArgs& a, int32_t t, int64_t tile, int32_t thread) {
  const RowTiling& tl = a.tiling[t];
  const int64_t task = tl.task_of(tile, thread);
  if (task >= tl.row_tasks) return;
  const Geometry g = a.geom[t];
  const int64_t j = tl.peer_of(g, task);
  const int64_t r = tl.row_of(g, task, j);
  // The chunk's sequence and head positions, and the heads of h it moves (a head chunk's: Geometry::moved, which
  // lie moved_skip_bytes into h's rows, and in the piece of the chunk's workspace slot at moved_offset(s, h)).
  const bool seq_side = a.side == static_cast<int32_t>(TensorSide::kSeq);
  const int64_t h = seq_side ? j : g.me;
  const int64_t s = seq_side ? g.me : j;
  const HeadSpan m = g.moved(h);
  const int64_t rb = m.size() * g.dim_bytes();
  if (rb <= 0) return;
  const int64_t skip = g.whole() ? 0 : (m.begin - g.head_begin(h)) * g.dim_bytes();
  const int64_t tensor_offset =
      seq_side ? r * g.seq_row_bytes() + m.begin * g.dim_bytes() : g.head_row_offset(h, s, r) + skip;
  const int64_t wire_offset = a.workspace.chunk_offset(t, j) + g.seq_rows(s) * skip + r * rb;
  const unsigned char* src = a.to_wire ? a.tensor[t] + tensor_offset : a.wire + wire_offset;
  unsigned char* dst = a.to_wire ? a.wire + wire_offset : a.tensor[t] + tensor_offset;
  const int64_t lanes = tl.lanes();
  const int64_t n = rb / V;
  for (int64_t c = tl.lane_of(thread); c < n; c += kCopyUnroll * lanes) {
    typename VecOf<V>::type v[kCopyUnroll];
    BASP_UNROLL
    for (int32_t u = 0; u < kCopyUnroll; ++u) {
      if (c + u * lanes < n) v[u] = load_vec<V>(src + (c + u * lanes) * V);
    }
    BASP_UNROLL
    for (int32_t u = 0; u < kCopyUnroll; ++u) {
      if (c + u * lanes < n) store_vec<V>(dst + (c + u * lanes) * V, v[u]);
    }
  }
}

// Thread `thread` of launch-wide tile `tile`.
BASP_HOST_DEVICE void copy_tile(const RowCopyArgs& a, int64_t tile, int32_t thread) {
  int32_t t = 0;
  while (t + 1 < a.num_tensors && tile >= a.tiling[t + 1].first_tile) ++t;
  const int64_t local = tile - a.tiling[t].first_tile;
  switch (a.tiling[t].vec_bytes) {
    case 16: copy_tile_rows<16>(a, t, local, thread); break;
    case 8: copy_tile_rows<8>(a, t, local, thread); break;
    case 4: copy_tile_rows<4>(a, t, local, thread); break;
    case 2: copy_tile_rows<2>(a, t, local, thread); break;
    default: copy_tile_rows<1>(a, t, local, thread); break;
  }
}

// Builds the arguments of one launch. tensors[t] is the tensor side of tensor t, `wire` the packed workspace.
// Each tensor gets the widest access its row length and addresses allow.
inline RowCopyArgs make_row_copy_args(const Geometry* geoms, int32_t n, const PackedWorkspace& workspace,
                                      TensorSide side, bool to_wire, const void* const* tensors, const void* wire) {
  RowCopyArgs a;
  a.num_tensors = n;
  a.side = static_cast<int32_t>(side);
  a.to_wire = to_wire ? 1 : 0;
  a.wire = static_cast<unsigned char*>(const_cast<void*>(wire));
  a.workspace = workspace;
  int64_t tiles = 0;
  for (int32_t t = 0; t < n; ++t) {
    a.geom[t] = geoms[t];
    a.tensor[t] = static_cast<unsigned char*>(const_cast<void*>(tensors[t]));
    const uint64_t bits = reinterpret_cast<uintptr_t>(tensors[t]) | reinterpret_cast<uintptr_t>(wire) |
                          static_cast<uint64_t>(workspace.tensor_offset[t]) |
                          static_cast<uint64_t>(workspace.peer_stride[t]);
    a.tiling[t] =
        make_row_tiling(geoms[t], side == TensorSide::kHead, vec_bytes_for(row_unit_bytes(geoms[t]), bits), tiles);
    tiles += a.tiling[t].num_tiles;
  }
  a.num_tiles = tiles;
  return a;
}

// The summing gather's receive side (layout/sum_rows.h): every head h of every row r of the rank's sequence-sharded
// tensor is the sum, in ascending position, of its holders' rows in the wire (one contribution: a plain copy of
// its bytes). One task per (row, head), `threads` threads per task over the head's elements. Tensors whose heads
// are not replicated take the plain row copy instead.
struct SumUnpackArgs {
  Geometry geom;
  int32_t tensor = 0;
  int32_t dtype = 0;
  unsigned char* seq = nullptr;
  const unsigned char* wire = nullptr;
  PackedWorkspace workspace;
  const uint32_t* skip = nullptr;  // as RowCopyArgs::skip

  BASP_HOST_DEVICE int64_t num_tasks() const { return geom.seq_rows(geom.me) * geom.heads; }
};

// Holder p's contribution to head h in row r of a head chunk's gather: in the piece of the chunk p sent it in
// (Geometry::gather_chunk_of), which earlier chunks of the round left in the workspace.
BASP_HOST_DEVICE const unsigned char* chunk_contribution(const SumUnpackArgs& a, int64_t p, int64_t h, int64_t r) {
  const Geometry& g = a.geom;
  const Geometry sent = g.chunk(static_cast<int32_t>(g.gather_chunk_of(p, h)), g.chunk_count, true);
  return a.wire + a.workspace.chunk_offset(a.tensor, p) + sent.moved_offset(g.me, p) + r * sent.moved_row_bytes(p) +
         (h - sent.moved(p).begin) * g.dim_bytes();
}

// A head chunk's task writes head h only in the chunk that brings its last contribution (Geometry::gather_sum_chunk),
// summing every holder's from where its chunk left it, as the whole gather sums them.
BASP_HOST_DEVICE void sum_unpack_task(const SumUnpackArgs& a, int64_t task, int32_t thread, int32_t threads) {
  const Geometry& g = a.geom;
  const int64_t r = task / g.heads;
  const int64_t h = task % g.heads;
  if (!g.whole() && g.gather_sum_chunk(h) != g.chunk_index) return;
  const int64_t first = g.first_holder(h);
  const int64_t last = g.last_holder(h);
  const int64_t db = g.dim_bytes();
  unsigned char* dst = a.seq + r * g.seq_row_bytes() + h * db;
  auto source = [&](int32_t c) {
    const int64_t p = first + c;
    if (!g.whole()) return chunk_contribution(a, p, h, r);
    return a.wire + a.workspace.chunk_offset(a.tensor, p) + r * g.head_row_bytes(p) + (h - g.head_begin(p)) * db;
  };
  if (first == last) {
    const unsigned char* src = source(0);
    for (int64_t i = thread; i < db; i += threads) dst[i] = src[i];
    return;
  }
  const int64_t elem = g.elem;
  for (int64_t e = thread; e < g.head_dim; e += threads) {
    sum_elements(
        a.dtype, dst + e * elem, [&](int32_t c) { return source(c) + e * elem; },
        static_cast<int32_t>(last - first + 1), 1);
  }
}

}  // namespace basp::layout
