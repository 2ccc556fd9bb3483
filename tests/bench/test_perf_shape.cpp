// From requested sizes to shapes: S is a multiple of N, every rank holds T = B*S/N tokens, the row reports the
// bytes actually moved, and impossible shapes are an error naming the options.
#include <catch2/catch.hpp>

#include <vector>

#include "perf_shape.h"

using namespace basp::bench;
using Catch::Matchers::Contains;

TEST_CASE("bytes_per_token sums the heads of every exchange", "[bench][shape]") {
  const std::vector<Exchange> round_trip{{Direction::kScatter, {32, 8, 8}}, {Direction::kGather, {32}}};
  CHECK(bytes_per_token(round_trip, 128, 2) == (32 + 8 + 8 + 32) * 128 * 2);
  const std::vector<Exchange> huge{{Direction::kScatter, {int64_t{1} << 40}}};
  CHECK_THROWS_AS(bytes_per_token(huge, int64_t{1} << 30, 8), ArgError);
}

TEST_CASE("shape_rows derives S from the per-rank size", "[bench][shape]") {
  const int64_t token = 48 * 128 * 2;  // Q, K, V with Hq = 32, Hkv = 8, D = 128, bf16
  const int64_t n = 8;
  const std::vector<int64_t> sizes{1024, 1 << 20, 64 << 20, (64 << 20) + 1};
  const std::vector<RowShape> rows = shape_rows(sizes, {1, 2, 4, 8}, n, token, 2);
  int64_t last_b = -1, last_s = -1;
  for (const RowShape& r : rows) {
    INFO("B " << r.micro_batch << " S " << r.seq_len);
    CHECK(r.seq_len % n == 0);
    CHECK(r.seq_len >= n);
    CHECK(r.tokens_per_rank * n == r.micro_batch * r.seq_len);
    CHECK(r.bytes == r.tokens_per_rank * token);
    CHECK(r.count * 2 == r.bytes);
    // Never more than asked for, except the one-token-per-sequence minimum.
    CHECK((r.bytes <= (64 << 20) + 1 || r.seq_len == n));
    // Sizes that give the same S are measured once.
    CHECK(!(r.micro_batch == last_b && r.seq_len == last_s));
    last_b = r.micro_batch;
    last_s = r.seq_len;
  }
  // 64 MiB at B = 2: T = 64 MiB / 12 KiB = 5461 tokens -> 2730 per sequence -> S = 8 * 2730.
  bool found = false;
  for (const RowShape& r : rows) {
    if (r.micro_batch == 2 && r.seq_len == 8 * 2730) found = true;
  }
  CHECK(found);
  // 1 KiB is below one token per sequence per rank: it becomes the minimum S = N.
  CHECK(rows.front().seq_len == n);
  CHECK(rows.front().bytes == token);
}

TEST_CASE("shape_rows rejects a minimum shape beyond the size bound", "[bench][shape]") {
  CHECK_THROWS_WITH(shape_rows({1024}, {int64_t{1} << 30}, 8, 1 << 20, 2), Contains("-B (1073741824)"));
}
