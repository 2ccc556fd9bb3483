// The one piece of arithmetic the library does: the gather of a head that several positions hold (a key/value head
// of grouped-query attention whose query heads are split across ranks) sums the holders' contributions, in
// ascending position, FP16/BF16/FP32 in FP32 and FP64 in FP64, rounding to nearest even once at the end. The
// conversions are written out bit by bit (no intrinsics, no fused multiply-add) so that the host paths and the
// device kernels give bit-identical results. Host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "basp/basp.h"
#include "common/host_device.h"

namespace basp::layout {

// Whether a gather may sum this dtype.
BASP_HOST_DEVICE bool summable(int32_t dtype) {
  return dtype == BASP_DTYPE_FP16 || dtype == BASP_DTYPE_BF16 || dtype == BASP_DTYPE_FP32 || dtype == BASP_DTYPE_FP64;
}

BASP_HOST_DEVICE uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
BASP_HOST_DEVICE float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

BASP_HOST_DEVICE float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;  // subnormal: normalise
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

BASP_HOST_DEVICE uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                        // rounds to infinity
  if (a < 0x38800000u) {                                                                     // subnormal or zero
    if (a < 0x33000000u) return sign;
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (a >> 13) - (112u << 10);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

BASP_HOST_DEVICE float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

BASP_HOST_DEVICE uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// dst[i] = src(0)[i] + src(1)[i] + ... + src(n-1)[i], left to right, for i < count elements of `dtype`; src(c) is
// the c-th contribution in ascending position. `dtype` must be summable().
template <typename Source>
BASP_HOST_DEVICE void sum_elements(int32_t dtype, unsigned char* dst, Source src, int32_t n, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == BASP_DTYPE_FP64) {
      double acc = 0.0;
      for (int32_t c = 0; c < n; ++c) {
        double v;
        std::memcpy(&v, src(c) + i * 8, 8);
        acc = c == 0 ? v : acc + v;
      }
      std::memcpy(dst + i * 8, &acc, 8);
    } else if (dtype == BASP_DTYPE_FP32) {
      float acc = 0.0f;
      for (int32_t c = 0; c < n; ++c) {
        float v;
        std::memcpy(&v, src(c) + i * 4, 4);
        acc = c == 0 ? v : acc + v;
      }
      std::memcpy(dst + i * 4, &acc, 4);
    } else {
      const bool half = dtype == BASP_DTYPE_FP16;
      float acc = 0.0f;
      for (int32_t c = 0; c < n; ++c) {
        uint16_t v;
        std::memcpy(&v, src(c) + i * 2, 2);
        const float x = half ? half_to_float(v) : bf16_to_float(v);
        acc = c == 0 ? x : acc + x;
      }
      const uint16_t out = half ? float_to_half(acc) : float_to_bf16(acc);
      std::memcpy(dst + i * 2, &out, 2);
    }
  }
}

}  // namespace basp::layout
