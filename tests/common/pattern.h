// Test data that is a function of global coordinates: byte e of element (tensor t, sequence b, token s,
// head h, dim d). Any element landing in the wrong place, or never written, compares unequal.
#pragma once

#include <cstdint>

namespace basp::test {

inline uint8_t pattern_byte(uint64_t seed, int64_t t, int64_t b, int64_t s, int64_t h, int64_t d, int64_t e) {
  uint64_t x = seed ^ 0x9e3779b97f4a7c15ull;
  for (int64_t v : {t, b, s, h, d, e}) {
    x ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (x << 6) + (x >> 2);
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
  }
  return static_cast<uint8_t>(x);
}

constexpr uint8_t kPoison = 0xA5;

}  // namespace basp::test
