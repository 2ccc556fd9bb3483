// Topology-aware group placement: pure arithmetic, no I/O, no hwloc.
//
// Input: every rank's node, NVLink domain and local GPU, and per node the GPU-to-GPU NVLink bandwidth and PCI
// locality. Output: the membership lists plan::make_layout consumes. Rules, in order:
//   1. a group stays inside one NVLink domain when it fits in one (a domain is a node unless the GPUs report a
//      multi-node NVLink fabric, as on GB200 NVL72);
//   2. inside a domain a group spans as few nodes as possible (whole-node groups first, then the nodes' leftover
//      ranks packed greedily: exact fits, then the largest piece that fits, splitting a node only when nothing
//      fits);
//   3. inside a node the partition into parts maximises the weakest intra-part NVLink bandwidth, then the total,
//      then the weakest and total PCI locality (node_partition.h);
//   4. remaining ties go to the lowest ranks, earlier groups first: with node-contiguous numbering on a
//      symmetric machine whose nodes hold a multiple or a divisor of K ranks, the result is the paper's
//      contiguous assignment.
// Groups are ordered by their lowest rank and members by rank, so every rank computes the same layout from the
// same gathered input whatever the rank numbering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace basp::plan {

// How close two GPUs of one node are on the host side, far to near. Values are stored in records and XML: fixed.
// nvidia-smi topo's words: kSystem and kPackage print as SYS, then NODE, PHB, PXB, PIX.
enum PciLocality : uint8_t {
  kLocalitySystem = 0,       // different CPU packages (or unknown)
  kLocalityPackage = 1,      // same package, different NUMA nodes
  kLocalityNumaNode = 2,     // same NUMA node, different PCIe host bridges
  kLocalityHostBridge = 3,   // same PCIe host bridge
  kLocalityPciSwitches = 4,  // several PCIe switches, no host bridge
  kLocalityPciSwitch = 5,    // one PCIe switch
};

// One node's GPUs: square matrices indexed [a * num_gpus + b] by local GPU index.
struct NodeLinks {
  int32_t num_gpus = 0;
  std::vector<uint32_t> bandwidth;  // NVLink MB/s one way, summed over links; 0 = no NVLink
  std::vector<uint8_t> locality;    // PciLocality

  uint32_t bandwidth_between(int32_t a, int32_t b) const;
  uint8_t locality_between(int32_t a, int32_t b) const;
};

struct RankPlace {
  uint64_t node = 0;    // ranks with equal keys share a node
  uint64_t domain = 0;  // NVLink domain spanning nodes; 0 = the node is its own domain
  int32_t gpu = -1;     // index into the node's NodeLinks; -1 = no GPU (host memory)
};

struct PlacementInput {
  std::vector<RankPlace> ranks;                   // [N], by world rank
  std::unordered_map<uint64_t, NodeLinks> nodes;  // by node key; a node missing here has no link information
};

// G groups of N/G ranks. Throws (naming the value) when G does not divide N or a node's GPU index is out of
// range. Cost: O(N log N) for the hierarchy and packing, plus one node partition per distinct node shape (see
// node_partition.h): identical nodes are solved once, so 65,536 ranks on 8-GPU nodes plan in milliseconds.
std::vector<std::vector<int32_t>> place_groups(const PlacementInput& input, int32_t num_groups);

// Shared by place_groups and place_mixed_groups (mixed_placement.cpp): the ranks of one node (or of a piece of one)
// and the groups' parts of them, (size, group index).
struct NodeShare {
  uint64_t node = 0;
  std::vector<int32_t> ranks;                      // ascending
  std::vector<std::pair<int32_t, int32_t>> parts;  // (size, group index)
};
// The members of `num_groups` groups from their node shares: each share partitioned by partition_node for the
// strongest links (shares of one shape solved once), members ascending, groups ordered by their lowest rank.
std::vector<std::vector<int32_t>> members_of_shares(const PlacementInput& in, const std::vector<NodeShare>& shares,
                                                    size_t num_groups);

}  // namespace basp::plan
