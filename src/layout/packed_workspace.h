// The peer-major packed workspace of the device path: what one all-to-all sends or receives.
//
// For every peer j, one contiguous block of peer_stride bytes holds the chunks of all tensors of the exchange,
// tensor after tensor, each starting at a multiple of kWireAlign bytes:
//   [peer 0: tensor 0 chunk | pad | tensor 1 chunk | pad | ...][peer 1: ...]...[peer K-1: ...]
// Every peer block has the same size, so Q, K and V of one exchange move in a single ncclAlltoAll whose count is
// peer_stride bytes. Row r of tensor t's chunk for peer j starts at chunk_offset(t, j) + r * row bytes.
// The padding keeps every chunk 16-byte aligned, so the wire side never forces the kernels off vector accesses.
// Uniform geometries only (Geometry::uniform(): every chunk the same size); the NCCL backend refuses others.
#pragma once

#include <cstdint>

#include "basp/basp.h"
#include "common/host_device.h"
#include "layout/geometry.h"

namespace basp::layout {

constexpr int64_t kWireAlign = 16;

struct PackedWorkspace {
  int64_t peer_stride = 0;                       // bytes of one peer's block
  int64_t tensor_offset[BASP_MAX_TENSORS] = {};  // tensor t's chunk inside a peer block

  BASP_HOST_DEVICE int64_t chunk_offset(int32_t t, int64_t j) const { return j * peer_stride + tensor_offset[t]; }
  BASP_HOST_DEVICE int64_t row_offset(const Geometry& g, int32_t t, int64_t j, int64_t r) const {
    return chunk_offset(t, j) + r * g.head_row_bytes(g.me);
  }
  // Bytes of the whole buffer for a group of k peers.
  BASP_HOST_DEVICE int64_t bytes(int64_t k) const { return k * peer_stride; }
};

BASP_HOST_DEVICE int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Lays out the chunks of `n` tensors (n <= BASP_MAX_TENSORS; the plan's sizes are already overflow-checked).
inline PackedWorkspace make_packed_workspace(const Geometry* tensors, int32_t n) {
  PackedWorkspace w;
  for (int32_t t = 0; t < n; ++t) {
    w.tensor_offset[t] = w.peer_stride;
    w.peer_stride += round_up(tensors[t].chunk_bytes(tensors[t].me, tensors[t].me), kWireAlign);
  }
  return w;
}

}  // namespace basp::layout
