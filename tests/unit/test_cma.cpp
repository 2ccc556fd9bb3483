// The cross-memory-attach channel (src/transport/mpi/cma.h) against this very process: ranges are merged where they
// are contiguous on both sides, and a range larger than one system call may move is split, every byte landing where
// it belongs (the kernel would otherwise cut a call at about 2 GiB and report a short copy).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/mpi/cma.h"

using basp::transport::mpi::CmaChannel;

namespace {

std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("cma: a range larger than one call is split, every byte in place", "[cma]") {
  const std::vector<std::byte> source = pattern(1 << 20, 7);
  std::vector<std::byte> target(source.size(), std::byte{0});
  CmaChannel channel(4096 + 100);  // not a divisor of the size: the last call is partial
  channel.begin(getpid(), 0, /*write=*/false);
  channel.add(target.data(), reinterpret_cast<uintptr_t>(source.data()), source.size());
  channel.flush();
  CHECK(target == source);
  CHECK(channel.calls() == (source.size() + 4195) / 4196);
}

TEST_CASE("cma: contiguous ranges merge into one call, scattered ones land in order", "[cma]") {
  const std::vector<std::byte> source = pattern(64 * 1024, 3);
  std::vector<std::byte> target(source.size(), std::byte{0});
  CmaChannel channel;
  channel.begin(getpid(), 0, /*write=*/false);
  // Blocks of 1 KiB, the odd ones first, then the even ones: 64 remote ranges, 64 local ones, one call.
  for (int pass = 1; pass >= 0; --pass) {
    for (size_t b = static_cast<size_t>(pass); b < 64; b += 2) {
      channel.add(target.data() + b * 1024, reinterpret_cast<uintptr_t>(source.data() + b * 1024), 1024);
    }
  }
  channel.flush();
  CHECK(target == source);
  CHECK(channel.calls() == 1);
}
