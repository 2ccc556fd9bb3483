// The staged path (the default on one node): the plan owns one staging region per rank in shared memory (a memfd
// mapped by every rank of the group), holding every peer's packed chunk of every tensor.
//   1. each rank writes what its peers need into its own region: scatter packs its input row-major into one chunk
//      per peer (own slice straight into the output); gather copies each peer's blocks of its input into that
//      peer's chunk;
//   2. round 1 (kArrive): the exchange, every rank's tensor addresses, and that its region is filled;
//   3. each rank copies its chunk out of every peer's region: scatter into its output's blocks (large memcpy
//      calls), gather row-major into its output (own slice straight from its input);
//   4. round 2 (kDone): nobody rewrites its region while a peer may still read it.
// Two user-space copies per byte, any row size, no system call per row. When round 1 shows that every rank's
// head-sharded tensors lie in basp_mem_alloc memory, the shared path (one copy) runs instead of steps 3, and a
// rank whose own tensors lie there skips step 1, expecting it; if its peers' do not, it fills its region after
// round 1 and a third round (kReady) follows. A rank writes only its own region before round 1, so a rank that
// gives up there (a peer never came) has written nothing a late peer could not overwrite itself; inputs are only
// ever read. A batch plan's regions are the comm's per-node staging instead (node_staging.h), made at comm creation:
// one region per rank and direction, so its gathers and scatters never share a byte.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/error.h"
#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/node_staging.h"

namespace basp::transport::mpi {
namespace {

constexpr int64_t kStreamingMinBytes = int64_t{4} << 20;  // as the shared path

// Where the staged path's regions live: each position's, mapped here, per direction (a plan's own regions serve
// both directions; the comm's node staging has one per direction).
struct StagingRegions {
  std::vector<std::byte*> scatter;      // per position
  std::vector<std::byte*> gather;       // per position
  int64_t bytes = 0;                    // the size of this rank's (of each direction's)
  std::unique_ptr<SharedMemory> owned;  // a plan's own regions (none: the comm's node staging)

  const std::vector<std::byte*>& of(Direction d) const { return d == Direction::kScatter ? scatter : gather; }
};

class StagedPath final : public ExchangePath {
 public:
  StagedPath(const PathContext& context, StagingRegions regions)
      : c_(context),
        shared_(context),
        regions_(std::move(regions)),
        places_(static_cast<size_t>(context.plan->group_size)) {}

  basp_path_t id() const override { return BASP_PATH_STAGED; }
  int64_t workspace_bytes() const override { return regions_.bytes; }

  basp_path_t run(const Exchange& x) override {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t n = p.num_tensors();
    const bool staged = !shared_.mine_usable(x);
    if (staged) fill_region(x);
    uint64_t addresses[2 * BASP_MAX_TENSORS];
    c_.control->arrive(addresses, tensor_addresses(x, n, addresses), staged ? kFlagStaged : 0u, x.deadline,
                       x.scatter() ? "the arrival of the group's ranks at basp_scatter (staged path)"
                                   : "the arrival of the group's ranks at basp_gather (staged path)");
    const bool shared = shared_.usable(x);
    if (shared) {
      shared_.copy(x);
    } else {
      bool all_staged = true;
      for (int32_t j = 0; j < p.group_size; ++j) all_staged = all_staged && (c_.control->peer(j).flags & kFlagStaged);
      if (!all_staged) {
        if (!staged) fill_region(x);
        c_.control->round(kReady, x.deadline,
                          "the staged path's second arrival (tensors in basp_mem_alloc memory "
                          "on some ranks of the group only)");
      }
      copy_out(x);
    }
    c_.control->round(kDone, x.deadline,
                      "the staged path's completion (a peer still pending may yet read this rank's staging area)");
    return shared ? BASP_PATH_SHARED : BASP_PATH_STAGED;
  }

 private:
  static bool streaming(const layout::Geometry& g) { return g.head_tensor_bytes(g.me) >= kStreamingMinBytes; }

  // Tensor t's chunk for position j in the region of position `owner`.
  std::byte* chunk(const Exchange& x, int32_t owner, int32_t t, int32_t j) const {
    return regions_.of(x.direction)[static_cast<size_t>(owner)] +
           c_.plan->region_offset(owner, t, j, x.geom[t], x.direction);
  }

  void fill_region(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t me = p.position;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const layout::Geometry& g = x.geom[t];
      const auto* in = static_cast<const std::byte*>(x.inputs[t]);
      if (x.scatter()) {
        for (int32_t j = 0; j < p.group_size; ++j) {
          places_[static_cast<size_t>(j)] = j == me ? layout::RowPlace{static_cast<std::byte*>(x.outputs[t]), true}
                                                    : layout::RowPlace{chunk(x, me, t, j), false};
        }
        layout::scatter_rows(g, in, places_.data(), streaming(g));
      } else {
        for (int32_t j = 0; j < p.group_size; ++j) {
          if (j != me) layout::pack_head_rows(g, in, chunk(x, me, t, j), j, streaming(g));
        }
      }
    }
  }

  void copy_out(const Exchange& x) {
    const plan::ExchangePlan& p = *c_.plan;
    const int32_t k = p.group_size;
    const int32_t me = p.position;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const layout::Geometry& g = x.geom[t];
      auto* out = static_cast<std::byte*>(x.outputs[t]);
      if (x.scatter()) {
        for (int32_t i = 1; i < k; ++i) {
          const int32_t j = (me + i) % k;
          layout::unpack_head_rows(g, chunk(x, j, t, me), out, j, streaming(g));
        }
      } else {
        for (int32_t j = 0; j < k; ++j) {
          places_[static_cast<size_t>(j)] =
              j == me ? layout::RowPlace{static_cast<std::byte*>(const_cast<void*>(x.inputs[t])), true}
                      : layout::RowPlace{chunk(x, j, t, me), false};
        }
        layout::gather_rows(g, places_.data(), out, p.spec.dtype, streaming(g));
      }
    }
  }

  PathContext c_;
  SharedPath shared_;
  StagingRegions regions_;
  std::vector<layout::RowPlace> places_;  // scratch: one place per position
};

}  // namespace

// A batch plan's regions are the comm's node staging (node_staging.h), per direction: this rank's grown to its need
// and each peer's mapped as far as that peer will write it.
std::unique_ptr<ExchangePath> make_batch_staged_path(const PathContext& context, NodeStaging& staging) {
  const plan::ExchangePlan& p = *context.plan;
  StagingRegions regions;
  for (const Direction d : {Direction::kScatter, Direction::kGather}) {
    std::vector<std::byte*>& base = d == Direction::kScatter ? regions.scatter : regions.gather;
    base.assign(static_cast<size_t>(p.group_size), nullptr);
    for (int32_t j = 0; j < p.group_size; ++j) {
      const int64_t bytes = p.region_bytes(j);
      base[static_cast<size_t>(j)] =
          j == p.position ? staging.own(d, bytes) : staging.peer(d, context.peer_rank(j), bytes);
    }
  }
  regions.bytes = p.region_bytes(p.position);
  return std::make_unique<StagedPath>(context, std::move(regions));
}

// A plan's own regions, collectively: none (on every rank alike) when some rank cannot map another's.
std::unique_ptr<ExchangePath> make_staged_path(const PathContext& context, const CollectiveScope& group,
                                               const detail::Deadline& deadline) {
  const plan::ExchangePlan& p = *context.plan;
  StagingRegions regions;
  regions.owned = std::make_unique<SharedMemory>();
  regions.bytes = p.region_bytes(p.position);
  bool shared = false;
  void* mine = regions.owned->allocate(group, p.position, static_cast<size_t>(std::max<int64_t>(regions.bytes, 64)),
                                       &shared, deadline, "basp_plan_create");
  if (!shared) {
    regions.owned->release(group, p.position, mine, deadline, "basp_plan_create");
    return nullptr;
  }
  regions.scatter.assign(static_cast<size_t>(p.group_size), nullptr);
  for (int32_t j = 0; j < p.group_size; ++j) {
    regions.scatter[static_cast<size_t>(j)] =
        j == p.position ? static_cast<std::byte*>(mine) : regions.owned->first_region_of(j);
  }
  regions.gather = regions.scatter;
  // Fault every mapping in now, not in the first execute (zero pages of a fresh memfd are shared).
  std::memset(mine, 0, static_cast<size_t>(regions.bytes));
  return std::make_unique<StagedPath>(context, std::move(regions));
}

}  // namespace basp::transport::mpi
