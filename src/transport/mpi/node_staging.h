// The per-node staging of a comm's batch plans (docs/batch.md): every rank owns two regions of shared memory
// (memfds), one per direction, that every rank of its node maps, made at comm creation and grown at batch plan
// creation to the largest staging that rank's batch plans need. Every batch plan's scatters use the scatter
// regions and its gathers the gather regions, so a gather that sums held heads, whose earlier chunks'
// contributions wait in its holders' regions until its last chunk, shares no byte with a scatter between them. A batch
// plan whose group lies on one node then takes the staged path over these regions without any collective step of its
// own: each rank grows its own region, and maps as much of each peer's as its plan says that peer will write (the same
// arithmetic on every rank of the group), before any peer has grown it; nothing is read from a peer's region before
// that peer's first control message of the exchange, which it sends after growing and filling it.
//
// Mappings are never moved: a region that grows gets a second, larger mapping, and the older ones stay valid
// (they map the same pages) for the plans made before, until the comm is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "common/direction.h"
#include "transport/mpi/mpi_collectives.h"

namespace basp::transport::mpi {

// Every world rank's node as an index (by first appearance of its key in `nodes`), or -1 where any rank of that node
// has ok[r] == 0: the verdict every rank reaches alike from the same gathered flags.
std::vector<int32_t> working_nodes(const std::vector<uint64_t>& nodes, const std::vector<int64_t>& ok);
// Whether `members` (two or more world ranks) all lie on one working node of `node` (working_nodes' answer; empty:
// none).
bool on_one_working_node(const std::vector<int32_t>& node, const std::vector<int32_t>& members);

class NodeStaging {
 public:
  NodeStaging() = default;
  NodeStaging(const NodeStaging&) = delete;
  NodeStaging& operator=(const NodeStaging&) = delete;
  ~NodeStaging();

  // Collective over the world (`world.comm`, at comm creation), this rank `me`, `nodes` every world rank's node
  // key (empty: unknown, no staging). Makes this rank's (empty) region and opens every node peer's; a node where
  // some rank cannot make its region or open a peer's has no staging (on every rank alike).
  void set_up(const CollectiveScope& world, int32_t me, const std::vector<uint64_t>& nodes,
              const detail::Deadline& deadline);
  // Whether world rank r's node has staging (its ranks can all map each other's regions).
  bool usable(int32_t r) const { return !node_.empty() && node_[static_cast<size_t>(r)] >= 0; }
  // Whether every rank of `members` (world ranks, two or more) is on one node with staging.
  bool one_node(const std::vector<int32_t>& members) const;

  // Not collective (batch plan creation): this rank's region of `direction`, at least `bytes` long (grown and
  // faulted in now), mapped here. Throws BASP_ERROR_OUT_OF_MEMORY naming the bytes when the kernel refuses.
  std::byte* own(Direction direction, int64_t bytes);
  // Not collective: at least `bytes` of world rank `peer`'s region of `direction` (a node peer with staging),
  // mapped here.
  std::byte* peer(Direction direction, int32_t peer, int64_t bytes);

 private:
  struct Mapping {
    std::byte* address;
    size_t bytes;
  };
  // One direction's regions: this rank's and its node peers'.
  struct Regions {
    int own_fd = -1;
    int64_t own_bytes = 0;  // the region's length
    std::byte* own_base = nullptr;
    std::vector<int> peer_fd;           // per world rank: its memfd opened here (node peers), else -1
    std::vector<int64_t> peer_bytes;    // per world rank: how much of it the newest mapping covers
    std::vector<std::byte*> peer_base;  // per world rank: the newest mapping
  };
  Regions& regions(Direction d) { return regions_[d == Direction::kScatter ? 0 : 1]; }
  std::byte* map(int fd, int64_t bytes, const char* whose, int32_t rank);
  void close_peers();

  std::mutex mutex_;  // plan creation may run on several threads
  int32_t me_ = -1;
  std::vector<int32_t> node_;      // per world rank: its node (an index) when the node has staging, else -1
  Regions regions_[2];             // scatter, gather
  std::vector<Mapping> mappings_;  // every mapping made, unmapped at destruction
};

}  // namespace basp::transport::mpi
