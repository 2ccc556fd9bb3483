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

std::vector<topology::RankLocality> allgather_locality(ncclComm_t comm, int device, const topology::RankLocality& mine,
                                                       const detail::Deadline& deadline) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm, &size));
  std::vector<topology::RankLocality> all(static_cast<size_t>(size));
  allgather_to_host(comm, device, &mine, sizeof(topology::RankLocality), all.data(),
                    "the gather of the ranks' GPU locations (basp_comm_create_nccl)", parent_where(size), deadline);
  return all;
}

}  // namespace basp::transport::nccl
