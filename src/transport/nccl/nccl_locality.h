// Placement input of the NCCL backend: each rank's locality record (topology/rank_locality.h) names its CUDA
// device in its node's topology, so that groups land on the GPUs with the strongest NVLinks between them.
#pragma once

#include "topology/rank_locality.h"

namespace basp::transport::nccl {

// This rank's record for CUDA device `device`: its GPU in the node's topology (found by PCI bus id), or only its
// node when the topology does not list that GPU (no NVML, no driver information).
topology::RankLocality local_gpu_locality(int device);

}  // namespace basp::transport::nccl
