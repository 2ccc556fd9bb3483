// Index math of the redistribution, shared by the host copies, the CUDA kernels and the unit tests.
//
// One tensor of one exchange, seen from one rank at position l of a group of K ranks:
//   sequence-sharded  [b_loc][S/K][H][D]    (BSHD)   or  [S/K][b_loc][H][D]    (SBHD)
//   head-sharded      [b_loc][S][H/K][D]    (BSHD)   or  [S][b_loc][H/K][D]    (SBHD)
// The unit of movement is a *row*: the H/K * D elements of one (sequence, token) pair that belong to one head
// slice. The chunk a rank exchanges with peer j has b_loc * S/K rows, enumerated in the layout's order of
// (sequence, token), so the row index r means the same thing on both sides of the exchange:
//   - in the sequence-sharded tensor, row r of peer j's slice starts at (r * H + j * H/K) * D elements: every
//     row is a separate piece (unless K = 1);
//   - in the head-sharded tensor, peer j's rows form contiguous blocks: b_loc blocks of S/K rows, S rows apart
//     (BSHD), or a single block of b_loc * S/K rows (SBHD);
//   - on the wire (a packed chunk), row r starts at r * row_bytes.
#pragma once

#include <cstdint>

#include "basp/basp.h"
#include "common/host_device.h"

namespace basp::layout {

struct Geometry {
  int32_t layout = BASP_LAYOUT_BSHD;  // basp_layout_t
  int64_t b_loc = 0;                  // sequences the group owns
  int64_t s_loc = 0;                  // tokens per rank, S / K
  int64_t k = 0;                      // group size
  int64_t heads = 0;                  // H of this tensor
  int64_t head_dim = 0;               // D
  int64_t elem = 0;                   // bytes per element

  BASP_HOST_DEVICE int64_t heads_per_rank() const { return heads / k; }
  BASP_HOST_DEVICE int64_t seq_len() const { return s_loc * k; }
  BASP_HOST_DEVICE int64_t rows() const { return b_loc * s_loc; }
  BASP_HOST_DEVICE int64_t row_bytes() const { return heads_per_rank() * head_dim * elem; }
  BASP_HOST_DEVICE int64_t chunk_bytes() const { return rows() * row_bytes(); }
  BASP_HOST_DEVICE int64_t tensor_bytes() const { return rows() * heads * head_dim * elem; }

  // Sequence-sharded side: byte offset of row r of peer j's head slice.
  BASP_HOST_DEVICE int64_t seq_row_offset(int64_t r, int64_t j) const {
    return (r * heads + j * heads_per_rank()) * head_dim * elem;
  }

  // Head-sharded side: peer j's rows come in num_blocks() contiguous blocks of block_rows() rows.
  BASP_HOST_DEVICE int64_t block_rows() const { return layout == BASP_LAYOUT_BSHD ? s_loc : s_loc * b_loc; }
  BASP_HOST_DEVICE int64_t num_blocks() const { return layout == BASP_LAYOUT_BSHD ? b_loc : 1; }
  BASP_HOST_DEVICE int64_t block_stride_rows() const { return layout == BASP_LAYOUT_BSHD ? s_loc * k : 0; }

  // Head-sharded side: byte offset of row r of peer j's chunk.
  BASP_HOST_DEVICE int64_t head_row_offset(int64_t r, int64_t j) const {
    const int64_t br = block_rows();
    return ((r / br) * block_stride_rows() + j * br + (r % br)) * row_bytes();
  }

  // Packed chunk: byte offset of row r.
  BASP_HOST_DEVICE int64_t wire_row_offset(int64_t r) const { return r * row_bytes(); }

  // The tensor's shapes on this rank, 4 dimensions in the layout's own order.
  BASP_HOST_DEVICE void seq_sharded_shape(int64_t* dims) const {
    const bool bshd = layout == BASP_LAYOUT_BSHD;
    dims[0] = bshd ? b_loc : s_loc;
    dims[1] = bshd ? s_loc : b_loc;
    dims[2] = heads;
    dims[3] = head_dim;
  }
  BASP_HOST_DEVICE void head_sharded_shape(int64_t* dims) const {
    const bool bshd = layout == BASP_LAYOUT_BSHD;
    dims[0] = bshd ? b_loc : seq_len();
    dims[1] = bshd ? seq_len() : b_loc;
    dims[2] = heads_per_rank();
    dims[3] = head_dim;
  }
};

}  // namespace basp::layout
