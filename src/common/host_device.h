// BASP_HOST_DEVICE marks index math that both the host code (and its unit tests) and the CUDA kernels call,
// so CI on a machine without a GPU runs the very offsets the kernels use.
#pragma once

#if defined(__CUDACC__)
#define BASP_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BASP_HOST_DEVICE inline
#endif
