// The packed workspace of the device path: what the exchange of one scatter or gather sends or receives.
//
// Two layouts, both addressed as chunk_offset(t, j) = tensor_offset[t] + j * peer_stride[t]:
//   peer-major (uniform geometries, make_packed_workspace): for every peer j, one contiguous block holds the
//     chunks of all tensors, tensor after tensor, each starting at a multiple of kWireAlign bytes:
//       [peer 0: tensor 0 chunk | pad | tensor 1 chunk | pad | ...][peer 1: ...]...[peer K-1: ...]
//     Every peer block has the same size (peer_stride[t], equal for every t), so Q, K and V of one exchange move in
//     a single ncclAlltoAll;
//   slotted (any geometry, make_slotted_workspace): tensor after tensor, K slots per tensor, each the size of the
//     tensor's largest chunk (in either direction, at the plan's capacity), so that an execute of fewer tokens
//     (THD) finds every chunk at the same place; the chunks travel as grouped ncclSend/ncclRecv of their own sizes.
// Row r of tensor t's chunk for peer j starts at chunk_offset(t, j) + r * its row bytes. The padding keeps every
// chunk 16-byte aligned, so the wire side never forces the kernels off vector accesses.
#pragma once

#include <cstdint>

#include "basp/basp.h"
#include "common/host_device.h"
#include "layout/geometry.h"

namespace basp::layout {

constexpr int64_t kWireAlign = 16;

struct PackedWorkspace {
  int64_t tensor_offset[BASP_MAX_TENSORS] = {};  // tensor t's chunk for peer 0
  int64_t peer_stride[BASP_MAX_TENSORS] = {};    // from one peer's chunk of tensor t to the next
  int64_t total = 0;                             // bytes of the whole buffer

  BASP_HOST_DEVICE int64_t chunk_offset(int32_t t, int64_t j) const { return tensor_offset[t] + j * peer_stride[t]; }
  BASP_HOST_DEVICE int64_t bytes() const { return total; }
};

BASP_HOST_DEVICE int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Peer-major, for uniform geometries (every chunk of a tensor the same size); `tensors` at the plan's shape.
inline PackedWorkspace make_packed_workspace(const Geometry* tensors, int32_t n) {
  PackedWorkspace w;
  int64_t block = 0;
  for (int32_t t = 0; t < n; ++t) {
    w.tensor_offset[t] = block;
    block += round_up(tensors[t].chunk_bytes(tensors[t].me, tensors[t].me), kWireAlign);
  }
  for (int32_t t = 0; t < n; ++t) w.peer_stride[t] = block;
  w.total = n > 0 ? block * tensors[0].k : 0;
  return w;
}

// Slotted, for any geometry; `tensors` at the plan's shape (THD: its capacity).
inline PackedWorkspace make_slotted_workspace(const Geometry* tensors, int32_t n) {
  PackedWorkspace w;
  int64_t offset = 0;
  for (int32_t t = 0; t < n; ++t) {
    const Geometry& g = tensors[t];
    int64_t slot = 0;
    for (int64_t j = 0; j < g.k; ++j) {
      const int64_t out = g.chunk_bytes(g.me, j);  // this rank's rows of j's heads
      const int64_t in = g.chunk_bytes(j, g.me);   // j's rows of this rank's heads
      slot = slot > out ? slot : out;
      slot = slot > in ? slot : in;
    }
    w.tensor_offset[t] = offset;
    w.peer_stride[t] = round_up(slot, kWireAlign);
    offset += w.peer_stride[t] * g.k;
  }
  w.total = offset;
  return w;
}

}  // namespace basp::layout
