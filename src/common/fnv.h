// FNV-1a, 64 bits: the fingerprints ranks compare (a plan's call record, a batch description, document boundaries)
// and the keys of node and NVLink-domain names. A word is hashed as its 8 bytes, lowest first, so the same words
// give the same value on every rank and platform of one job.
#pragma once

#include <cstddef>
#include <cstdint>

namespace basp::detail {

class Fnv1a {
 public:
  static constexpr uint64_t kOffset = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;

  explicit Fnv1a(uint64_t seed = kOffset) : hash_(seed) {}
  void add_bytes(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash_ = (hash_ ^ p[i]) * kPrime;
  }
  void add(int64_t word) {
    auto v = static_cast<uint64_t>(word);
    for (int b = 0; b < 8; ++b) {
      hash_ = (hash_ ^ (v & 0xffu)) * kPrime;
      v >>= 8;
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_;
};

}  // namespace basp::detail
