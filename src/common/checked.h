// Overflow-checked size arithmetic for sizes that come from callers.
#pragma once

#include <cstdint>
#include <limits>

#include "common/error.h"

namespace basp::detail {

// a * b, or an INVALID_ARGUMENT error naming `what` when the product does not fit in int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) {
    fail(BASP_ERROR_INVALID_ARGUMENT, what, " overflows (", a, " * ", b, ")");
  }
  return out;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) fail(BASP_ERROR_INVALID_ARGUMENT, what, " overflows (", a, " + ", b, ")");
  return out;
}

}  // namespace basp::detail
