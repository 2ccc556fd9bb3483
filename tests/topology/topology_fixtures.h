// Helpers of the topology tests: fixture paths, worlds of ranks built from node topologies, group sets.
#pragma once

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "runtime/comm.h"
#include "topology/node_identity.h"
#include "topology/rank_locality.h"
#include "topology/topology.h"

namespace basp::test {

inline std::string fixture(const std::string& name) { return std::string(BASP_TOPOLOGY_FIXTURES) + "/" + name; }
inline std::string recorded_dir() { return BASP_RECORDED_HWLOC_FIXTURES; }
inline std::string recorded(const std::string& name) { return recorded_dir() + "/" + name; }

// A rank on GPU `gpu` of `topo`, on the node called `node` (its own key, whatever the topology's identity).
inline topology::RankLocality on_node(const topology::Topology& topo, int32_t gpu, const std::string& node) {
  topology::RankLocality r = topology::make_rank_locality(topo, gpu);
  const topology::RankLocality named =
      topology::make_rank_locality(topology::NodeIdentity{topology::fnv1a64(node), node, "test"});
  r.node_key = named.node_key;
  std::memcpy(r.node_name, named.node_name, sizeof(r.node_name));
  return r;
}

// `nodes` copies of `topo` with one rank per GPU; rank numbering node by node, or round-robin over the nodes
// (SLURM --distribution=cyclic, Open MPI --map-by node). gpu_of_local[i] is the GPU of a node's i-th rank
// (default: GPU i).
inline std::vector<topology::RankLocality> world(const topology::Topology& topo, int32_t nodes, bool cyclic,
                                                 std::vector<int32_t> gpu_of_local = {}) {
  const int32_t per = topo.num_gpus();
  if (gpu_of_local.empty()) {
    for (int32_t i = 0; i < per; ++i) gpu_of_local.push_back(i);
  }
  std::vector<topology::RankLocality> out(static_cast<size_t>(per * nodes));
  for (int32_t n = 0; n < nodes; ++n) {
    for (int32_t i = 0; i < per; ++i) {
      const int32_t rank = cyclic ? i * nodes + n : n * per + i;
      out[static_cast<size_t>(rank)] = on_node(topo, gpu_of_local[static_cast<size_t>(i)], "node" + std::to_string(n));
    }
  }
  return out;
}

inline std::vector<std::vector<int32_t>> groups(const std::vector<topology::RankLocality>& ranks, int32_t num_groups,
                                                basp_placement_t placement = BASP_PLACEMENT_TOPOLOGY) {
  runtime::CommOptions o;
  o.micro_batch = num_groups;
  o.num_groups = num_groups;
  o.placement = placement;
  return runtime::plan_groups(static_cast<int32_t>(ranks.size()), o, ranks).members;
}

// The groups as sets of the GPUs their ranks use (rank r uses gpu_of[r]), so that a placement can be compared
// with the expected GPU sets whatever the rank numbering.
inline std::set<std::set<int32_t>> gpu_sets(const std::vector<std::vector<int32_t>>& groups,
                                            const std::vector<int32_t>& gpu_of) {
  std::set<std::set<int32_t>> out;
  for (const auto& members : groups) {
    std::set<int32_t> gpus;
    for (int32_t r : members) gpus.insert(gpu_of[static_cast<size_t>(r)]);
    out.insert(gpus);
  }
  return out;
}

using GroupSet = std::set<std::set<int32_t>>;

inline GroupSet as_set(const std::vector<std::vector<int32_t>>& members) {
  GroupSet out;
  for (const auto& m : members) out.insert(std::set<int32_t>(m.begin(), m.end()));
  return out;
}

inline std::set<uint64_t> nodes_of(const std::vector<topology::RankLocality>& ranks,
                                   const std::vector<int32_t>& group) {
  std::set<uint64_t> out;
  for (int32_t r : group) out.insert(ranks[static_cast<size_t>(r)].node_key);
  return out;
}

}  // namespace basp::test
