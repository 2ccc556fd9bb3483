#include "transport/nccl/nccl_locality.h"

#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda_check.h"
#include "topology/node_identity.h"
#include "topology/topology.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

topology::RankLocality local_gpu_locality(int device) {
  try {
    char bus_id[64] = {};
    BASP_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), device));
    const topology::Topology& topo = topology::local_topology();
    const int32_t gpu = topo.find_gpu(bus_id);
    return gpu >= 0 ? topology::make_rank_locality(topo, gpu) : topology::make_rank_locality(topo.node());
  } catch (const detail::Error&) {
    // Every rank must reach the gather that follows: a rank whose discovery failed still takes part, placed by
    // its node only, instead of failing alone and leaving the others waiting.
    return topology::make_rank_locality(topology::local_node_identity());
  }
}

}  // namespace basp::transport::nccl
