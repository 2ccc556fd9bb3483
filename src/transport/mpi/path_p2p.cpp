// The point-to-point path (anywhere; the only one across nodes). One control round names the exchange, then all
// chunks of all tensors travel as non-blocking messages on the plan's own duplicate of the group communicator and
// complete together, Q, K and V in one exchange. Packed at most once per direction (layout/geometry.h):
//   scatter: rows for peer j are strided on the send side and contiguous blocks on the receive side, so the sender
//            packs each peer's chunk into the workspace (packing the next peer overlaps the transfer of this one)
//            and the receiver receives straight into its output through a vector datatype;
//   gather:  the mirror image: sent straight from the input through the same datatype, landed in the workspace
//            and unpacked as each chunk arrives.
// The data receives are posted before the control round, the sends after it: a mismatched exchange sends nothing,
// and its receives, which nothing matched, are cancelled.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/keep_forever.h"
#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/mpi_wait.h"

namespace basp::transport::mpi {
namespace {

constexpr int kScatterTagBase = 0;
constexpr int kGatherTagBase = BASP_MAX_TENSORS;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

int to_int(int64_t v, const char* what) {
  BASP_CHECK_ARG(v >= 0 && v <= INT_MAX, what, " (", v, ") exceeds the MPI count limit (", INT_MAX, ")");
  return static_cast<int>(v);
}

class P2pPath final : public ExchangePath {
 public:
  P2pPath(const PathContext& context, MPI_Comm group) : c_(context), comm_(dup_with_errors_return(group)) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t n = p.num_tensors();
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = p.tensors[t];
      MPI_Datatype row = MPI_DATATYPE_NULL;
      BASP_MPI_CHECK(MPI_Type_contiguous(to_int(g.row_bytes(), "row bytes"), MPI_BYTE, &row));
      OwnedType row_owned(row);
      BASP_MPI_CHECK(MPI_Type_commit(&row));
      MPI_Datatype block = MPI_DATATYPE_NULL;
      BASP_MPI_CHECK(MPI_Type_vector(to_int(g.num_blocks(), "blocks"), to_int(g.block_rows(), "block rows"),
                                     to_int(g.block_stride_rows(), "block stride"), row, &block));
      OwnedType block_owned(block);
      BASP_MPI_CHECK(MPI_Type_commit(&block));
      row_counts_.push_back(to_int(g.rows(), "rows per chunk"));
      row_types_.push_back(std::move(row_owned));
      head_types_.push_back(std::move(block_owned));
    }
    const auto k = static_cast<size_t>(p.group_size);
    requests_.assign(2 * static_cast<size_t>(n) * (k - 1), MPI_REQUEST_NULL);
    request_peer_.assign(requests_.size(), -1);
    if (p.bytes_sent > 0) {
      const auto bytes = static_cast<size_t>((p.bytes_sent + 63) / 64 * 64);
      workspace_.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
      if (!workspace_) detail::fail(BASP_ERROR_OUT_OF_MEMORY, "workspace of ", bytes, " bytes");
      std::memset(workspace_.get(), 0, bytes);  // fault the pages in now, not in the first execute
    }
  }

  ~P2pPath() override {
    // A released request may still touch the workspace (a send MPI could not cancel, waiting for a late peer):
    // freeing it would let MPI read freed memory when that peer arrives.
    if (workspace_pinned_) detail::keep_forever(std::shared_ptr<std::byte>(workspace_.release(), FreeDeleter()));
  }

  basp_path_t id() const override { return BASP_PATH_P2P; }
  int64_t workspace_bytes() const override { return c_.plan->bytes_sent; }

  basp_path_t run(const Exchange& x) override {
    nreq_ = 0;
    try {
      if (x.scatter()) {
        scatter(x);
      } else {
        gather(x);
      }
    } catch (...) {
      if (drop_requests(requests_.data(), static_cast<int>(nreq_)) > 0) workspace_pinned_ = true;
      throw;
    }
    return BASP_PATH_P2P;
  }

 private:
  void scatter(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    const int32_t n = p.num_tensors();
    MPI_Comm comm = comm_.get();
    // Receives first, from the peers in the order they will send to us.
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me - i + k) % k;
      for (int32_t t = 0; t < n; ++t) {
        auto* out = static_cast<std::byte*>(x.outputs[t]) + p.tensors[t].head_row_offset(0, j);
        request_peer_[nreq_] = j;
        BASP_MPI_CHECK(MPI_Irecv(out, 1, head_types_[t].get(), j, kScatterTagBase + t, comm, &requests_[nreq_]));
        ++nreq_;
      }
    }
    c_.control->arrive(nullptr, 0, 0, x.deadline, "the arrival of the group's ranks at basp_scatter (p2p path)");
    // Pack each peer's chunk and send it at once, so packing the next overlaps the transfer of this one.
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me + i) % k;
      for (int32_t t = 0; t < n; ++t) {
        std::byte* chunk = workspace_.get() + p.workspace_offset(t, j);
        layout::pack_seq_rows(p.tensors[t], static_cast<const std::byte*>(x.inputs[t]), chunk, j);
        request_peer_[nreq_] = j;
        BASP_MPI_CHECK(
            MPI_Isend(chunk, row_counts_[t], row_types_[t].get(), j, kScatterTagBase + t, comm, &requests_[nreq_]));
        ++nreq_;
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      layout::copy_seq_to_head(p.tensors[t], static_cast<const std::byte*>(x.inputs[t]),
                               static_cast<std::byte*>(x.outputs[t]), me);
    }
    wait_all(requests_.data(), static_cast<int>(nreq_), Requests::kPointToPoint, x.deadline,
             "the point-to-point exchange of basp_scatter", label());
  }

  void gather(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    const int32_t n = p.num_tensors();
    MPI_Comm comm = comm_.get();
    const size_t nrecv = static_cast<size_t>(n * (k - 1));
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me - i + k) % k;
      for (int32_t t = 0; t < n; ++t) {
        std::byte* chunk = workspace_.get() + p.workspace_offset(t, j);
        request_peer_[nreq_] = j;
        BASP_MPI_CHECK(
            MPI_Irecv(chunk, row_counts_[t], row_types_[t].get(), j, kGatherTagBase + t, comm, &requests_[nreq_]));
        ++nreq_;
      }
    }
    c_.control->arrive(nullptr, 0, 0, x.deadline, "the arrival of the group's ranks at basp_gather (p2p path)");
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me + i) % k;
      for (int32_t t = 0; t < n; ++t) {
        const auto* in = static_cast<const std::byte*>(x.inputs[t]) + p.tensors[t].head_row_offset(0, j);
        request_peer_[nreq_] = j;
        BASP_MPI_CHECK(MPI_Isend(in, 1, head_types_[t].get(), j, kGatherTagBase + t, comm, &requests_[nreq_]));
        ++nreq_;
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      layout::copy_head_to_seq(p.tensors[t], static_cast<const std::byte*>(x.inputs[t]),
                               static_cast<std::byte*>(x.outputs[t]), me);
    }
    // Unpack each chunk as soon as it lands.
    for (size_t done = 0; done < nrecv; ++done) {
      const int index = wait_any(requests_.data(), static_cast<int>(nrecv), Requests::kPointToPoint, x.deadline,
                                 "the point-to-point exchange of basp_gather", label());
      if (index == MPI_UNDEFINED) break;
      const int32_t i = index / n + 1;
      const int32_t t = index % n;
      const int32_t j = (me - i + k) % k;
      layout::unpack_seq_rows(p.tensors[t], workspace_.get() + p.workspace_offset(t, j),
                              static_cast<std::byte*>(x.outputs[t]), j);
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
  OwnedComm comm_;                     // the plan's own: its data tags never meet another plan's
  std::vector<OwnedType> row_types_;   // one row of tensor t, contiguous bytes
  std::vector<OwnedType> head_types_;  // one peer's rows of tensor t in the head-sharded tensor
  std::vector<int> row_counts_;
  std::unique_ptr<std::byte, FreeDeleter> workspace_;
  bool workspace_pinned_ = false;
  std::vector<MPI_Request> requests_;
  std::vector<int32_t> request_peer_;  // the peer of each request, for timeout messages
  size_t nreq_ = 0;
};

}  // namespace

std::unique_ptr<ExchangePath> make_p2p_path(const PathContext& context, MPI_Comm group) {
  return std::make_unique<P2pPath>(context, group);
}

}  // namespace basp::transport::mpi
