// The English names of the C ABI's enums: each basp_status_t, shared by basp_status_string() and the library's
// own messages ("rank 3 = BASP_ERROR_NULL_POINTER"; a status missing here reads "unknown status": test_capi walks
// them all), and each basp_path_t for the log lines.
#pragma once

#include "basp/basp.h"

namespace basp::detail {

constexpr const char* status_name(int status) {
  switch (status) {
    case BASP_SUCCESS: return "BASP_SUCCESS";
    case BASP_ERROR_INVALID_ARGUMENT: return "BASP_ERROR_INVALID_ARGUMENT";
    case BASP_ERROR_NULL_POINTER: return "BASP_ERROR_NULL_POINTER";
    case BASP_ERROR_INVALID_HANDLE: return "BASP_ERROR_INVALID_HANDLE";
    case BASP_ERROR_BAD_STRUCT: return "BASP_ERROR_BAD_STRUCT";
    case BASP_ERROR_UNSUPPORTED: return "BASP_ERROR_UNSUPPORTED";
    case BASP_ERROR_OUT_OF_MEMORY: return "BASP_ERROR_OUT_OF_MEMORY";
    case BASP_ERROR_MPI: return "BASP_ERROR_MPI";
    case BASP_ERROR_CUDA: return "BASP_ERROR_CUDA";
    case BASP_ERROR_NCCL: return "BASP_ERROR_NCCL";
    case BASP_ERROR_INTERNAL: return "BASP_ERROR_INTERNAL";
    case BASP_ERROR_MISMATCH: return "BASP_ERROR_MISMATCH";
    case BASP_ERROR_TIMEOUT: return "BASP_ERROR_TIMEOUT";
    case BASP_ERROR_COMM_BROKEN: return "BASP_ERROR_COMM_BROKEN";
    case BASP_ERROR_OOB: return "BASP_ERROR_OOB";
    default: return "unknown status";
  }
}

// The short name of a basp_path_t ("p2p", "nccl", ...), for the library's log lines; "none" before an exchange.
constexpr const char* path_name(int path) {
  switch (path) {
    case BASP_PATH_NONE: return "none";
    case BASP_PATH_LOCAL: return "local";
    case BASP_PATH_P2P: return "p2p";
    case BASP_PATH_CMA: return "cma";
    case BASP_PATH_SHARED: return "shared";
    case BASP_PATH_NCCL: return "nccl";
    case BASP_PATH_STAGED: return "staged";
    default: return "?";
  }
}

}  // namespace basp::detail
