#include "topology/rank_locality.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace basp::topology {

namespace {

void set_node(RankLocality& r, const NodeIdentity& node) {
  r.node_key = node.key;
  const size_t n = std::min(node.name.size(), sizeof(r.node_name) - 1);
  std::memcpy(r.node_name, node.name.data(), n);
  r.node_name[n] = '\0';
}

}  // namespace

RankLocality make_rank_locality(const NodeIdentity& node) {
  RankLocality r;
  set_node(r, node);
  return r;
}

RankLocality make_rank_locality(const Topology& topo, int32_t gpu) {
  BASP_CHECK_ARG(gpu >= -1 && gpu < topo.num_gpus(), "gpu (", gpu, ") is not -1 or a GPU of the topology (0..",
                 topo.num_gpus() - 1, ")");
  RankLocality r = make_rank_locality(topo.node());
  r.node_gpus = std::min(topo.num_gpus(), kMaxNodeGpus);
  r.link_source = static_cast<uint8_t>(topo.link_source());
  if (gpu < 0 || gpu >= kMaxNodeGpus) return r;
  r.gpu = gpu;
  r.domain_key = topo.gpus()[static_cast<size_t>(gpu)].domain_key;
  for (int32_t j = 0; j < r.node_gpus; ++j) {
    r.bandwidth[j] = topo.bandwidth(gpu, j);
    r.locality[j] = topo.locality(gpu, j);
  }
  return r;
}

std::string node_name_of(const RankLocality& r) {
  return std::string(r.node_name, strnlen(r.node_name, sizeof(r.node_name)));
}

plan::PlacementInput placement_input(const std::vector<RankLocality>& ranks) {
  plan::PlacementInput in;
  in.ranks.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankLocality& r = ranks[i];
    BASP_CHECK_ARG(r.magic == kRankLocalityMagic, "rank ", i, " sent a locality record with magic 0x", std::hex,
                   r.magic, " (expected 0x", kRankLocalityMagic, std::dec,
                   "): every rank must run the same libbasp version");
    BASP_CHECK_ARG(r.node_gpus >= 0 && r.node_gpus <= kMaxNodeGpus, "rank ", i, " reports ", r.node_gpus,
                   " GPUs on its node (0..", kMaxNodeGpus, ")");
    BASP_CHECK_ARG(r.gpu >= -1 && r.gpu < r.node_gpus, "rank ", i, " reports GPU ", r.gpu, " of ", r.node_gpus);
    in.ranks[i] = plan::RankPlace{r.node_key, r.gpu >= 0 ? r.domain_key : 0, r.gpu};
    plan::NodeLinks& links = in.nodes[r.node_key];
    if (links.num_gpus < r.node_gpus) {
      // Grow the matrices, keeping rows already filled by other ranks of the node.
      const auto old_n = static_cast<size_t>(links.num_gpus);
      const auto n = static_cast<size_t>(r.node_gpus);
      std::vector<uint32_t> bw(n * n, 0);
      std::vector<uint8_t> loc(n * n, plan::kLocalitySystem);
      for (size_t a = 0; a < old_n; ++a) {
        for (size_t b = 0; b < old_n; ++b) {
          bw[a * n + b] = links.bandwidth[a * old_n + b];
          loc[a * n + b] = links.locality[a * old_n + b];
        }
      }
      links.num_gpus = r.node_gpus;
      links.bandwidth = std::move(bw);
      links.locality = std::move(loc);
    }
    if (r.gpu < 0) continue;
    const auto n = static_cast<size_t>(links.num_gpus);
    for (int32_t j = 0; j < r.node_gpus; ++j) {
      links.bandwidth[static_cast<size_t>(r.gpu) * n + static_cast<size_t>(j)] = r.bandwidth[j];
      links.locality[static_cast<size_t>(r.gpu) * n + static_cast<size_t>(j)] = r.locality[j];
    }
  }
  return in;
}

}  // namespace basp::topology
