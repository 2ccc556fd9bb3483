// What one rank contributes to placement: a fixed-size, trivially copyable record that a communicator factory
// gathers from every rank of the parent (MPI_Allgather as bytes, or an NCCL bootstrap allgather), and the
// conversion of the gathered records into the placement input.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "plan/placement.h"
#include "topology/node_identity.h"
#include "topology/topology.h"

namespace basp::topology {

// GPUs of one node a record can describe; GPUs beyond it count as having no NVLink information.
constexpr int32_t kMaxNodeGpus = 32;
constexpr uint32_t kRankLocalityMagic = 0x424c4f31u;  // "BLO1": bump with any layout change

struct RankLocality {
  uint32_t magic = kRankLocalityMagic;
  int32_t gpu = -1;  // local GPU index in the node's topology, -1 = none (host memory)
  uint64_t node_key = 0;
  uint64_t domain_key = 0;  // multi-node NVLink domain of the rank's GPU, 0 = none
  int32_t node_gpus = 0;    // GPUs in the node's topology, at most kMaxNodeGpus
  uint8_t link_source = 0;  // LinkSource of the node's topology
  uint8_t reserved[3] = {0, 0, 0};
  char node_name[48] = {};                // NUL-terminated, truncated
  uint32_t bandwidth[kMaxNodeGpus] = {};  // MB/s from the rank's GPU to each GPU of the node
  uint8_t locality[kMaxNodeGpus] = {};    // plan::PciLocality from the rank's GPU to each GPU of the node
};
static_assert(std::is_trivially_copyable<RankLocality>::value, "RankLocality travels as bytes");

// A rank on GPU `gpu` of `topo` (-1: a rank without a GPU, still on topo's node). Throws naming `gpu` when it is
// not a GPU of the topology.
RankLocality make_rank_locality(const Topology& topo, int32_t gpu);

// A rank without a GPU: only its node. Needs no discovery (the MPI backend works in host memory).
RankLocality make_rank_locality(const NodeIdentity& node);

std::string node_name_of(const RankLocality& r);

// The gathered records -> placement input. Throws naming the rank when a record is malformed or from another
// libbasp version.
plan::PlacementInput placement_input(const std::vector<RankLocality>& ranks);

}  // namespace basp::topology
