// The cross-memory-attach path (one node, forced with BASP_MPI_TRANSPORT=cma, or taken when the ranks cannot map
// each other's memory but may read it). Every rank only ever reads a peer's memory, never writes it, so a rank that
// gave up (a timeout) and reused its tensors is never written into by a late peer, which only reads stale bytes
// and then times out itself. The kernel pins the pages of every range it copies, so both sides of every read are
// large contiguous ranges:
//   scatter: each rank packs its input into one chunk per peer in its own workspace (one row-major pass over the
//            group, its own slice straight into its output); round 1 (the exchange, the tensor addresses and the
//            workspace's); each rank reads its chunk out of every peer's workspace into its output's blocks;
//   gather:  round 1; each rank reads its rows out of every peer's head-sharded input blocks into its own
//            workspace, then unpacks them row-major over the group into its output;
//   round 2: done with the peers' memory.
// One system call per peer and tensor (more where a chunk spans more than IOV_MAX blocks), one copy by the kernel
// and one user-space copy per byte. A head chunk (plan/head_chunks.h) moves the same way its part of each row: its
// own piece of the workspaces (ExchangePlan::workspace_offset), one range per row on the head-sharded side.
#include <algorithm>
#include <exception>
#include <utility>

#include "common/error.h"
#include "layout/host_copy.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/exchange_path.h"

namespace basp::transport::mpi {
namespace {

constexpr int64_t kStreamingMinBytes = int64_t{4} << 20;  // as the shared and staged paths

class CmaPath final : public ExchangePath {
 public:
  CmaPath(const PathContext& context, std::vector<pid_t> pids)
      : c_(context), pids_(std::move(pids)), shared_(context), places_(static_cast<size_t>(context.plan->group_size)) {
    c_.workspaces.reserve(std::max<int64_t>(64, c_.plan->workspace_bytes(c_.plan->position)));
  }

  basp_path_t id() const override { return BASP_PATH_CMA; }
  int64_t workspace_bytes() const override { return c_.plan->workspace_bytes(c_.plan->position); }

  basp_path_t run(const Exchange& x) override {
    const int32_t n = c_.plan->num_tensors();
    if (x.scatter()) pack(x);
    uint64_t addresses[2 * BASP_MAX_TENSORS];
    try {
      c_.control->arrive(addresses, tensor_addresses(x, n, addresses), 0, x.deadline,
                         x.scatter() ? "the arrival of the group's ranks at basp_scatter (cma path)"
                                     : "the arrival of the group's ranks at basp_gather (cma path)",
                         reinterpret_cast<uint64_t>(workspace(x)));
    } catch (const detail::Error& e) {
      if (e.status() == BASP_ERROR_TIMEOUT) peers_may_read(x);
      throw;
    }
    const bool shared = shared_.usable(x);
    std::exception_ptr error;
    try {
      if (shared) {
        shared_.copy(x);
      } else if (x.scatter()) {
        read_chunks(x);
      } else {
        read_blocks(x);
        unpack(x);
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Nobody may return (and reuse its tensors or its workspace) while a peer may still read them.
    try {
      c_.control->round(kDone, x.deadline,
                        "the cma path's completion (a peer still pending may yet read this rank's tensors: do not "
                        "reuse them)");
    } catch (const detail::Error& e) {
      if (e.status() == BASP_ERROR_TIMEOUT) peers_may_read(x);
      throw;
    }
    if (error) std::rethrow_exception(error);
    return shared ? BASP_PATH_SHARED : BASP_PATH_CMA;
  }

 private:
  static bool streaming(const layout::Geometry& g) { return g.head_tensor_bytes(g.me) >= kStreamingMinBytes; }

  // The exchange's workspace: this plan's, or a batch plan's: the comm's pool's of the exchange's direction.
  std::byte* workspace(const Exchange& x) const { return c_.workspaces.of(x.direction).data(); }
  // A timeout left a peer that may still read the workspace (it reads, so this process is safe either way, but it
  // must not read memory reused for something else while it believes it is in the same exchange): keep it.
  void peers_may_read(const Exchange& x) { c_.workspaces.of(x.direction).pin(); }

  // Tensor t's chunk for position j in this rank's workspace.
  std::byte* own_chunk(const Exchange& x, int32_t t, int32_t j) const {
    const plan::ExchangePlan& p = *c_.plan;
    return workspace(x) + p.workspace_offset(p.position, t, j, x.geom[t]);
  }

  // scatter, before round 1: every peer's chunk into this rank's workspace, the own slice into the output.
  void pack(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      for (int32_t j = 0; j < p.group_size; ++j) {
        places_[static_cast<size_t>(j)] = j == p.position
                                              ? layout::RowPlace{static_cast<std::byte*>(x.outputs[t]), true}
                                              : layout::RowPlace{own_chunk(x, t, j), false};
      }
      layout::scatter_rows(x.geom[t], static_cast<const std::byte*>(x.inputs[t]), places_.data(), streaming(x.geom[t]));
    }
  }

  // One read from peer j: `blocks` ranges of `bytes` bytes each, from remote(b) into local(b).
  template <typename Local, typename Remote>
  void read_peer(int32_t j, int64_t blocks, int64_t bytes, Local local, Remote remote) {
    if (blocks == 0 || bytes == 0) return;
    channel_.begin(pids_[static_cast<size_t>(j)], j, /*write=*/false);
    for (int64_t b = 0; b < blocks; ++b) channel_.add(local(b), remote(b), static_cast<size_t>(bytes));
    channel_.flush();
  }

  // scatter: this rank's chunk out of every peer's workspace (contiguous) into its output's blocks.
  void read_chunks(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const layout::Geometry& g = x.geom[t];
      const int64_t rb = g.head_row_bytes(me);
      auto* out = static_cast<std::byte*>(x.outputs[t]);
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;  // staggered, so that ranks do not all read the same peer at once
        const int64_t block = g.block_rows(j) * rb;
        const uintptr_t remote = c_.control->peer(j).workspace + p.workspace_offset(j, t, me, x.geom[t]);
        if (!g.whole()) {  // a head chunk: its part of each row
          const int64_t moved = g.moved_row_bytes(me);
          std::byte* first = out + g.moved_skip_bytes(me);
          read_peer(
              j, g.seq_rows(j), moved, [&](int64_t r) { return first + g.head_row_offset(me, j, r); },
              [&](int64_t r) { return remote + r * moved; });
          continue;
        }
        read_peer(
            j, g.num_blocks(), block,
            [&](int64_t b) { return out + (g.block_start_row(j) + b * g.block_stride_rows()) * rb; },
            [&](int64_t b) { return remote + b * block; });
      }
    }
  }

  // gather: this rank's rows out of every peer's head-sharded input (its blocks) into this rank's workspace.
  void read_blocks(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const layout::Geometry& g = x.geom[t];
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;
        const int64_t rb = g.head_row_bytes(j);
        const int64_t block = g.block_rows(me) * rb;
        const auto remote = static_cast<uintptr_t>(c_.control->peer(j).address[t]);  // j's head-sharded input
        std::byte* chunk = own_chunk(x, t, j);
        if (!g.whole()) {  // a head chunk: its part of each row
          const int64_t moved = g.moved_row_bytes(j);
          const uintptr_t first = remote + g.moved_skip_bytes(j);
          read_peer(
              j, g.seq_rows(me), moved, [&](int64_t r) { return chunk + r * moved; },
              [&](int64_t r) { return first + g.head_row_offset(j, me, r); });
          continue;
        }
        read_peer(
            j, g.num_blocks(), block, [&](int64_t b) { return chunk + b * block; },
            [&](int64_t b) { return remote + (g.block_start_row(me) + b * g.block_stride_rows()) * rb; });
      }
    }
  }

  // gather: the chunks read, and the own slice from the input, row-major into the output.
  void unpack(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      for (int32_t j = 0; j < p.group_size; ++j) {
        places_[static_cast<size_t>(j)] =
            j == p.position ? layout::RowPlace{static_cast<std::byte*>(const_cast<void*>(x.inputs[t])), true}
                            : layout::RowPlace{own_chunk(x, t, j), false};
      }
      layout::gather_rows(x.geom[t], places_.data(), static_cast<std::byte*>(x.outputs[t]), p.spec.dtype,
                          streaming(x.geom[t]));
    }
  }

  PathContext c_;
  std::vector<pid_t> pids_;
  SharedPath shared_;
  CmaChannel channel_;
  std::vector<layout::RowPlace> places_;  // scratch: one place per position
};

}  // namespace

std::unique_ptr<ExchangePath> make_cma_path(const PathContext& context, std::vector<pid_t> pids) {
  return std::make_unique<CmaPath>(context, std::move(pids));
}

}  // namespace basp::transport::mpi
