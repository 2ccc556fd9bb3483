#include "transport/nccl/nccl_locality.h"

#include <cuda_runtime_api.h>

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

std::vector<topology::RankLocality> allgather_locality(ncclComm_t comm, int device, const topology::RankLocality& mine) {
  int size = 0;
  BASP_NCCL_CHECK(ncclCommCount(comm, &size));
  constexpr size_t kBytes = sizeof(topology::RankLocality);
  DeviceScope scope(device);
  DeviceBuffer send(static_cast<int64_t>(kBytes));
  DeviceBuffer recv(static_cast<int64_t>(kBytes) * size);
  BASP_CUDA_CHECK(cudaMemcpy(send.get(), &mine, kBytes, cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  BASP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const ncclResult_t rc = ncclAllGather(send.get(), recv.get(), kBytes, ncclUint8, comm, stream);
  const cudaError_t done = rc == ncclSuccess ? cudaStreamSynchronize(stream) : cudaSuccess;
  cudaStreamDestroy(stream);
  BASP_NCCL_CHECK(rc);
  if (done != cudaSuccess) detail::fail_cuda(done, "cudaStreamSynchronize(locality allgather)");
  std::vector<topology::RankLocality> all(static_cast<size_t>(size));
  BASP_CUDA_CHECK(cudaMemcpy(all.data(), recv.get(), kBytes * all.size(), cudaMemcpyDeviceToHost));
  return all;
}

}  // namespace basp::transport::nccl
