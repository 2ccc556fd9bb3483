// Element sizes of basp_dtype_t: the only thing the library knows about a type.
#pragma once

#include <cstdint>

#include "basp/basp.h"

namespace basp::plan {

// Bytes per element, 0 for a value outside basp_dtype_t.
constexpr int64_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case BASP_DTYPE_BYTE:
    case BASP_DTYPE_FP8_E4M3:
    case BASP_DTYPE_FP8_E5M2: return 1;
    case BASP_DTYPE_FP16:
    case BASP_DTYPE_BF16: return 2;
    case BASP_DTYPE_FP32:
    case BASP_DTYPE_INT32: return 4;
    case BASP_DTYPE_FP64:
    case BASP_DTYPE_INT64: return 8;
    default: return 0;
  }
}

// "BASP_DTYPE_FP16", ...; "unknown dtype" for other values.
constexpr const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case BASP_DTYPE_BYTE: return "BASP_DTYPE_BYTE";
    case BASP_DTYPE_FP8_E4M3: return "BASP_DTYPE_FP8_E4M3";
    case BASP_DTYPE_FP8_E5M2: return "BASP_DTYPE_FP8_E5M2";
    case BASP_DTYPE_FP16: return "BASP_DTYPE_FP16";
    case BASP_DTYPE_BF16: return "BASP_DTYPE_BF16";
    case BASP_DTYPE_FP32: return "BASP_DTYPE_FP32";
    case BASP_DTYPE_FP64: return "BASP_DTYPE_FP64";
    case BASP_DTYPE_INT32: return "BASP_DTYPE_INT32";
    case BASP_DTYPE_INT64: return "BASP_DTYPE_INT64";
    default: return "unknown dtype";
  }
}

}  // namespace basp::plan
