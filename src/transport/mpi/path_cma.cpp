// The cross-memory-attach path (one node, forced with BASP_MPI_TRANSPORT=cma, or taken when the ranks cannot map
// each other's memory but may read it). Round 1 names the exchange and carries every rank's tensor addresses; each
// rank then reads its rows out of every peer with process_vm_readv (scatter: its head slice out of the peer's
// input rows; gather: its tokens out of the peer's head-sharded input blocks); round 2 says it is done with the
// peers' memory. Every rank only ever reads a peer's memory, never writes it, so a rank that gave up (a timeout) and
// reused its tensors is never written into by a late peer, which only reads stale bytes and then times out itself.
#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "common/error.h"
#include "layout/host_copy.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/exchange_path.h"

namespace basp::transport::mpi {
namespace {

// Bytes of rows per tile: a tile is visited by every peer's read in turn while its local rows are still in cache.
constexpr int64_t kCmaTileBytes = int64_t{512} << 10;

class CmaPath final : public ExchangePath {
 public:
  CmaPath(const PathContext& context, std::vector<pid_t> pids)
      : c_(context), pids_(std::move(pids)), shared_(context) {}
  basp_path_t id() const override { return BASP_PATH_CMA; }

  basp_path_t run(const Exchange& x) override {
    const int32_t n = c_.plan->num_tensors();
    uint64_t addresses[2 * BASP_MAX_TENSORS];
    c_.control->arrive(addresses, tensor_addresses(x, n, addresses), 0, x.deadline,
                       x.scatter() ? "the arrival of the group's ranks at basp_scatter (cma path)"
                                   : "the arrival of the group's ranks at basp_gather (cma path)");
    const bool shared = shared_.usable(x);
    std::exception_ptr error;
    try {
      if (shared) {
        shared_.copy(x);
      } else {
        read_rows(x);
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Nobody may return (and reuse its tensors) while a peer may still read them.
    c_.control->round(kDone, x.deadline,
                      "the cma path's completion (a peer still pending may yet read this rank's tensors: do not "
                      "reuse them)");
    if (error) std::rethrow_exception(error);
    return shared ? BASP_PATH_SHARED : BASP_PATH_CMA;
  }

 private:
  void read_rows(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const layout::Geometry& g = p.tensors[t];
      const int64_t rb = g.row_bytes();
      const int64_t rows = g.rows();
      const int64_t tile = std::clamp<int64_t>(kCmaTileBytes / std::max<int64_t>(1, rb * k), 1,
                                               static_cast<int64_t>(CmaChannel::kMaxIov));
      const auto* in = static_cast<const std::byte*>(x.inputs[t]);
      auto* out = static_cast<std::byte*>(x.outputs[t]);
      for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        const int64_t r1 = std::min(rows, r0 + tile);
        for (int64_t r = r0; r < r1; ++r) {
          if (x.scatter()) {
            std::memcpy(out + g.head_row_offset(r, me), in + g.seq_row_offset(r, me), static_cast<size_t>(rb));
          } else {
            std::memcpy(out + g.seq_row_offset(r, me), in + g.head_row_offset(r, me), static_cast<size_t>(rb));
          }
        }
        for (int32_t i = 1; i < k; ++i) {
          const int32_t j = (me + i) % k;  // staggered, so that ranks do not all read the same peer at once
          const auto remote = static_cast<uintptr_t>(c_.control->peer(j).address[t]);  // j's input
          channel_.begin(pids_[static_cast<size_t>(j)], j, /*write=*/false);
          for (int64_t r = r0; r < r1; ++r) {
            if (x.scatter()) {
              channel_.add(out + g.head_row_offset(r, j), remote + g.seq_row_offset(r, me), rb);
            } else {
              channel_.add(out + g.seq_row_offset(r, j), remote + g.head_row_offset(r, me), rb);
            }
          }
          channel_.flush();
        }
      }
    }
  }

  PathContext c_;
  std::vector<pid_t> pids_;
  SharedPath shared_;
  CmaChannel channel_;
};

}  // namespace

std::unique_ptr<ExchangePath> make_cma_path(const PathContext& context, std::vector<pid_t> pids) {
  return std::make_unique<CmaPath>(context, std::move(pids));
}

}  // namespace basp::transport::mpi
