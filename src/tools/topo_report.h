// Text reports of basp-topo: the GPU matrix (in the manner of `nvidia-smi topo -m`), the nodes and NVLink
// domains of a set of ranks, and the groups placement forms for them.
#pragma once

#include <string>
#include <vector>

#include "plan/cost_model.h"
#include "plan/groups.h"
#include "topology/rank_locality.h"
#include "topology/topology.h"

namespace basp::tools {

// Header lines (origin, node, NVLink status) and the GPU matrix with CPU/NUMA affinity and NVLink domain.
std::string topology_report(const topology::Topology& topo);

// The legend of the matrix cells.
std::string matrix_legend();

// "NV50G" for 50000 MB/s, or the PCI locality word (PIX, PXB, PHB, NODE, SYS) when there is no NVLink.
std::string matrix_cell(uint32_t bandwidth_mb_s, uint8_t locality);

// Nodes (in order of their lowest rank) with their ranks and GPUs, and the multi-node NVLink domains.
std::string ranks_report(const std::vector<topology::RankLocality>& ranks);

// One line per group: its ranks, the nodes it spans and its weakest NVLink between ranks of one node.
std::string groups_report(const plan::GroupLayout& layout, const std::vector<topology::RankLocality>& ranks,
                          const std::string& placement);

// The cost model's coefficients and, for groups of K = 2, 4, ... up to `max_k`, the predicted time of one exchange
// of 64 KiB, 1 MiB and 16 MiB per rank inside a node and across nodes (one group alone on the link).
std::string cost_model_report(const plan::CostModel& model, int32_t max_k);

}  // namespace basp::tools
