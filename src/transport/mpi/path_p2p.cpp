// The point-to-point path (anywhere; the only one across nodes). One control round names the exchange, then all
// chunks of all tensors travel as non-blocking messages on the plan's own duplicate of the group communicator and
// complete together, Q, K and V in one exchange. Packed at most once per direction (layout/geometry.h):
//   scatter: rows for peer j are strided on the send side and contiguous blocks on the receive side, so the sender
//            packs each peer's chunk into the workspace (packing the next peer overlaps the transfer of this one)
//            and the receiver receives straight into its output (a vector datatype for BSHD with several
//            sequences, plain rows otherwise);
//   gather:  the mirror image: sent straight from the input, landed in the workspace and unpacked as each chunk
//            arrives; a tensor with replicated heads is unpacked once every chunk is in, summing those heads.
// A chunk of no bytes (a peer without heads or tokens) is not sent at all: both sides know its size.
// A head chunk (plan/head_chunks.h) moves the same way its heads' part of each row: packed in its own piece of
// the workspace (ExchangePlan::workspace_offset), received into or sent from the head-sharded tensor through a
// strided datatype, kept per shape (chunk_type).
// The data receives are posted before the control round, the sends after it: a mismatched exchange sends nothing,
// and its receives, which nothing matched, are cancelled.
#include <array>
#include <climits>
#include <utility>

#include "common/error.h"
#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/mpi_wait.h"

namespace basp::transport::mpi {
namespace {

constexpr int kScatterTagBase = 0;
constexpr int kGatherTagBase = BASP_MAX_TENSORS;

int to_int(int64_t v, const char* what) {
  BASP_CHECK_ARG(v >= 0 && v <= INT_MAX, what, " (", v, ") exceeds the MPI count limit (", INT_MAX, ")");
  return static_cast<int>(v);
}

OwnedType contiguous_type(int64_t bytes) {
  if (bytes == 0) return OwnedType();
  MPI_Datatype row = MPI_DATATYPE_NULL;
  BASP_MPI_CHECK(MPI_Type_contiguous(to_int(bytes, "row bytes"), MPI_BYTE, &row));
  OwnedType owned(row);
  BASP_MPI_CHECK(MPI_Type_commit(&row));
  return owned;
}

class P2pPath final : public ExchangePath {
 public:
  P2pPath(const PathContext& context, DataComm data) : c_(context), data_(std::move(data)), comm_(data_.comm) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t n = p.num_tensors();
    const int32_t k = p.group_size;
    types_.resize(static_cast<size_t>(n));
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = p.tensors[t];
      Types& ty = types_[static_cast<size_t>(t)];
      ty.head_row = contiguous_type(g.head_row_bytes(g.me));
      for (int32_t j = 0; j < k; ++j) {
        ty.seq_row.push_back(contiguous_type(g.head_row_bytes(j)));
        // A head-side block per sequence (BSHD with several sequences; the sequence length is then fixed).
        OwnedType block;
        if (g.num_blocks() > 1 && ty.head_row.get() != MPI_DATATYPE_NULL && g.tok_count(j) > 0) {
          MPI_Datatype v = MPI_DATATYPE_NULL;
          BASP_MPI_CHECK(MPI_Type_vector(to_int(g.num_blocks(), "blocks"), to_int(g.block_rows(j), "block rows"),
                                         to_int(g.block_stride_rows(), "block stride"), ty.head_row.get(), &v));
          block = OwnedType(v);
          BASP_MPI_CHECK(MPI_Type_commit(&v));
        }
        ty.head_block.push_back(std::move(block));
      }
    }
    const auto slots = 2 * static_cast<size_t>(n) * static_cast<size_t>(k - 1);
    requests_.assign(slots, MPI_REQUEST_NULL);
    request_peer_.assign(slots, -1);
    request_tensor_.assign(slots, -1);
    c_.workspaces.reserve(p.workspace_bytes(p.position));
    places_.resize(static_cast<size_t>(k));
    chunk_types_.resize(static_cast<size_t>(n) * static_cast<size_t>(k));
  }

  basp_path_t id() const override { return BASP_PATH_P2P; }
  int64_t workspace_bytes() const override { return c_.plan->workspace_bytes(c_.plan->position); }

  basp_path_t run(const Exchange& x) override {
    nreq_ = 0;
    try {
      if (x.scatter()) {
        scatter(x);
      } else {
        gather(x);
      }
    } catch (...) {
      if (drop_requests(requests_.data(), static_cast<int>(nreq_)) > 0) {
        // A send MPI could not cancel may still read the workspace when a late peer arrives: keep it.
        c_.workspaces.of(x.direction).pin();
      }
      throw;
    }
    return BASP_PATH_P2P;
  }

 private:
  struct ChunkShape {
    int64_t moved, row, blocks, block_rows, stride_rows;
    bool operator==(const ChunkShape& o) const {
      return moved == o.moved && row == o.row && blocks == o.blocks && block_rows == o.block_rows &&
             stride_rows == o.stride_rows;
    }
  };
  struct KeptType {
    ChunkShape shape{};
    OwnedType type;
    uint64_t used = 0;
  };
  struct Types {
    OwnedType head_row;                 // one row of this rank's head-sharded tensor
    std::vector<OwnedType> seq_row;     // per position j: the heads of j of one sequence-side row
    std::vector<OwnedType> head_block;  // per position j: j's rows in this rank's head-sharded tensor (BSHD, b > 1)
  };

  std::byte* chunk(const Exchange& x, int32_t t, int32_t j) const {
    const plan::ExchangePlan& p = *c_.plan;
    return c_.workspaces.of(x.direction).data() + p.workspace_offset(p.position, t, j, x.geom[t]);
  }

  // Posts the message of position j's rows in this rank's head-sharded tensor t: a receive (scatter) or a send
  // (gather). Nothing when they hold no bytes.
  void post_head_side(const Exchange& x, int32_t t, int32_t j, int tag, bool send) {
    const layout::Geometry& g = x.geom[t];
    if (g.seq_rows(j) == 0 || g.moved_row_bytes(g.me) == 0) return;
    const Types& ty = types_[static_cast<size_t>(t)];
    int64_t offset = g.block_start_row(j) * g.head_row_bytes(g.me);
    const bool block = ty.head_block[static_cast<size_t>(j)].get() != MPI_DATATYPE_NULL;
    int count = block ? 1 : to_int(g.seq_rows(j), "rows per chunk");
    MPI_Datatype type = block ? ty.head_block[static_cast<size_t>(j)].get() : ty.head_row.get();
    if (!g.whole()) {
      offset += g.moved_skip_bytes(g.me);
      count = 1;
      type = chunk_type(g, t, j);
    }
    request_peer_[nreq_] = j;
    request_tensor_[nreq_] = t;
    if (send) {
      const auto* in = static_cast<const std::byte*>(x.inputs[t]) + offset;
      BASP_MPI_CHECK(MPI_Isend(in, count, type, c_.peer_rank(j), tag, comm_, &requests_[nreq_]));
    } else {
      auto* out = static_cast<std::byte*>(x.outputs[t]) + offset;
      BASP_MPI_CHECK(MPI_Irecv(out, count, type, c_.peer_rank(j), tag, comm_, &requests_[nreq_]));
    }
    ++nreq_;
  }

  // Posts the message of this rank's sequence-side rows for position j, packed in the workspace.
  void post_seq_side(const Exchange& x, int32_t t, int32_t j, int tag, bool send) {
    const layout::Geometry& g = x.geom[t];
    if (g.seq_rows(g.me) == 0 || g.moved_row_bytes(j) == 0) return;
    int count = to_int(g.seq_rows(g.me), "rows per chunk");
    MPI_Datatype type = types_[static_cast<size_t>(t)].seq_row[static_cast<size_t>(j)].get();
    if (!g.whole()) {
      count = to_int(g.seq_rows(g.me) * g.moved_row_bytes(j), "head chunk bytes");
      type = MPI_BYTE;
    }
    request_peer_[nreq_] = j;
    request_tensor_[nreq_] = t;
    if (send) {
      BASP_MPI_CHECK(MPI_Isend(chunk(x, t, j), count, type, c_.peer_rank(j), tag, comm_, &requests_[nreq_]));
    } else {
      BASP_MPI_CHECK(MPI_Irecv(chunk(x, t, j), count, type, c_.peer_rank(j), tag, comm_, &requests_[nreq_]));
    }
    ++nreq_;
  }

  // A head chunk's rows of position j in this rank's head-sharded tensor t, from its first moved head: the moved
  // bytes of each row, whole rows apart. Its shape depends on the chunk's head count and, for THD, on the call's
  // rows; the two last shapes of each (t, j) are kept, so the chunks of a round, whose head counts differ by at
  // most one, make their datatypes once and later rounds of the same shapes make none.
  MPI_Datatype chunk_type(const layout::Geometry& g, int32_t t, int32_t j) {
    const ChunkShape shape{g.moved_row_bytes(g.me), g.head_row_bytes(g.me), g.num_blocks(), g.block_rows(j),
                           g.num_blocks() > 1 ? g.block_stride_rows() : g.block_rows(j)};
    auto& kept =
        chunk_types_[static_cast<size_t>(t) * static_cast<size_t>(c_.plan->group_size) + static_cast<size_t>(j)];
    for (KeptType& k : kept) {
      if (k.type.get() != MPI_DATATYPE_NULL && k.shape == shape) {
        k.used = ++uses_;
        return k.type.get();
      }
    }
    KeptType& slot = kept[0].used <= kept[1].used ? kept[0] : kept[1];  // the older one
    MPI_Datatype bytes = MPI_DATATYPE_NULL;
    BASP_MPI_CHECK(MPI_Type_contiguous(to_int(shape.moved, "row bytes"), MPI_BYTE, &bytes));
    const OwnedType moved(bytes);
    MPI_Datatype row = MPI_DATATYPE_NULL;
    BASP_MPI_CHECK(MPI_Type_create_resized(bytes, 0, shape.row, &row));
    const OwnedType strided(row);
    MPI_Datatype rows = MPI_DATATYPE_NULL;
    BASP_MPI_CHECK(MPI_Type_vector(to_int(shape.blocks, "blocks"), to_int(shape.block_rows, "block rows"),
                                   to_int(shape.stride_rows, "block stride"), row, &rows));
    slot.type = OwnedType(rows);
    BASP_MPI_CHECK(MPI_Type_commit(&rows));
    slot.shape = shape;
    slot.used = ++uses_;
    return rows;
  }

  void scatter(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    const int32_t n = p.num_tensors();
    // Receives first, from the peers in the order they will send to us.
    for (int32_t i = 1; i < k; ++i) {
      for (int32_t t = 0; t < n; ++t) post_head_side(x, t, (me - i + k) % k, kScatterTagBase + t, /*send=*/false);
    }
    c_.control->arrive(nullptr, 0, 0, x.deadline, "the arrival of the group's ranks at basp_scatter (p2p path)");
    // Pack each peer's chunk and send it at once, so packing the next overlaps the transfer of this one.
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me + i) % k;
      for (int32_t t = 0; t < n; ++t) {
        layout::seq_to_place(x.geom[t], static_cast<const std::byte*>(x.inputs[t]), {chunk(x, t, j), false}, j);
        post_seq_side(x, t, j, kScatterTagBase + t, /*send=*/true);
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      layout::seq_to_place(x.geom[t], static_cast<const std::byte*>(x.inputs[t]),
                           {static_cast<std::byte*>(x.outputs[t]), true}, me);
    }
    wait_all(requests_.data(), static_cast<int>(nreq_), Requests::kPointToPoint, x.deadline,
             "the point-to-point exchange of basp_scatter", label());
  }

  void gather(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    const int32_t n = p.num_tensors();
    for (int32_t i = 1; i < k; ++i) {
      for (int32_t t = 0; t < n; ++t) post_seq_side(x, t, (me - i + k) % k, kGatherTagBase + t, /*send=*/false);
    }
    const size_t nrecv = nreq_;
    c_.control->arrive(nullptr, 0, 0, x.deadline, "the arrival of the group's ranks at basp_gather (p2p path)");
    for (int32_t i = 1; i < k; ++i) {
      for (int32_t t = 0; t < n; ++t) post_head_side(x, t, (me + i) % k, kGatherTagBase + t, /*send=*/true);
    }
    // Tensors without replicated heads: the own slice now, each chunk as soon as it lands.
    for (int32_t t = 0; t < n; ++t) {
      if (x.geom[t].replicated()) continue;
      layout::place_to_seq(x.geom[t], {static_cast<std::byte*>(const_cast<void*>(x.inputs[t])), true},
                           static_cast<std::byte*>(x.outputs[t]), me);
    }
    for (size_t done = 0; done < nrecv; ++done) {
      const int index = wait_any(requests_.data(), static_cast<int>(nrecv), Requests::kPointToPoint, x.deadline,
                                 "the point-to-point exchange of basp_gather", label());
      if (index == MPI_UNDEFINED) break;
      const int32_t j = request_peer_[static_cast<size_t>(index)];
      const int32_t t = request_tensor_[static_cast<size_t>(index)];
      if (x.geom[t].replicated()) continue;
      layout::place_to_seq(x.geom[t], {chunk(x, t, j), false}, static_cast<std::byte*>(x.outputs[t]), j);
    }
    // Tensors with replicated heads: every contribution is in, summed in ascending position.
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = x.geom[t];
      if (!g.replicated()) continue;
      for (int32_t j = 0; j < k; ++j) {
        places_[static_cast<size_t>(j)] =
            j == me ? layout::RowPlace{static_cast<std::byte*>(const_cast<void*>(x.inputs[t])), true}
                    : layout::RowPlace{g.heads_of(j) > 0 ? chunk(x, t, j) : nullptr, false};
      }
      layout::gather_rows(g, places_.data(), static_cast<std::byte*>(x.outputs[t]), p.spec.dtype, false);
    }
    wait_all(requests_.data(), static_cast<int>(nreq_), Requests::kPointToPoint, x.deadline,
             "the point-to-point exchange of basp_gather", label());
  }

  WaitLabel label() const {
    WaitLabel l;
    l.where = &c_.group->where;
    l.members = &c_.group->members;
    l.peer_of = request_peer_.data();
    return l;
  }

  PathContext c_;
  DataComm data_;
  MPI_Comm comm_;
  std::vector<Types> types_;
  std::vector<MPI_Request> requests_;
  std::vector<int32_t> request_peer_;    // the peer of each request, for timeout messages
  std::vector<int32_t> request_tensor_;  // the tensor of each request
  std::vector<layout::RowPlace> places_;
  std::vector<std::array<KeptType, 2>> chunk_types_;  // [t * K + j]: chunk_type's last two shapes
  uint64_t uses_ = 0;                                 // chunk_type's clock: the older kept type is replaced
  size_t nreq_ = 0;
};

}  // namespace

std::unique_ptr<ExchangePath> make_p2p_path(const PathContext& context, DataComm data) {
  return std::make_unique<P2pPath>(context, std::move(data));
}

}  // namespace basp::transport::mpi
