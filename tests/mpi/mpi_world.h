// The MPI tests' view of the world: its size and this process's rank in MPI_COMM_WORLD, and how many CUDA devices
// this process sees (0 without CUDA, a driver or a device).
#pragma once

#include <mpi.h>

#if BASP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace basp::test {

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

#if BASP_HAVE_CUDA
inline int cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
#else
inline int cuda_devices() { return 0; }
#endif

}  // namespace basp::test
