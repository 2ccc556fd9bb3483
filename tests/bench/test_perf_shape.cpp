// From requested sizes to shapes: S = floor(N * size / (B * bytes per token)), not rounded to a multiple of N; the
// row reports the bytes of the rank holding the most; impossible shapes are an error naming the options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "perf_shape.h"

using namespace basp::bench;
using Catch::Matchers::Contains;

TEST_CASE("bytes_per_token sums the heads of every exchange", "[bench][shape]") {
  const std::vector<Exchange> round_trip{
      {Direction::kScatter, {{"Q", 32, 0}, {"K", 8, 32}, {"V", 8, 32}}},
      {Direction::kGather, {{"O", 32, 0}}},
  };
  CHECK(bytes_per_token(round_trip, 128, 2) == (32 + 8 + 8 + 32) * 128 * 2);
  const std::vector<Exchange> huge{{Direction::kScatter, {{"Q", int64_t{1} << 40, 0}}}};
  CHECK_THROWS_AS(bytes_per_token(huge, int64_t{1} << 30, 8), ArgError);
}

TEST_CASE("bytes_per_token sums heads x head size over the tensors", "[bench][shape]") {
  // A tensor's own head size wins over the run's (128 here); 0 takes the run's.
  const std::vector<Exchange> mixed{{Direction::kScatter, {{"Q", 4, 0, 192}, {"K", 4, 4, 0}, {"V", 2, 4, 8}}}};
  CHECK(bytes_per_token(mixed, 128, 2) == (4 * 192 + 4 * 128 + 2 * 8) * 2);  // 2592
  CHECK(bytes_per_token(mixed, 128, 2) == 2592);
  // DeepSeek-V3's forward pass from the command line: Q, K at 192, V and O at 128, 128 heads each, BF16:
  // (128*192 + 128*192 + 128*128 + 128*128) * 2 = (24576 + 24576 + 16384 + 16384) * 2.
  PerfOptions o = parse_perf_args(3, std::vector<const char*>{"perf", "--model", "deepseek-v3"}.data());
  const std::vector<Exchange> fwd{forward_scatter(o), forward_gather(o)};
  CHECK(bytes_per_token(fwd, o.head_dim, 2) == 163840);
  // Both passes: dO at V's size, dQ, dK, dV at Q's, K's, V's: twice the forward bytes.
  const std::vector<Exchange> both{forward_scatter(o), forward_gather(o), backward_scatter(o), backward_gather(o)};
  CHECK(bytes_per_token(both, o.head_dim, 2) == 327680);
  CHECK(describe_exchanges(fwd) ==
        "scatter Q(128 x 192) K(128 x 192, follows 128 query heads) V(128 x 128, follows 128 query heads); "
        "gather O(128 x 128)");
  // DeepSeek-V2-Lite, forward, FP32: (16*192 + 16*192 + 16*128 + 16*128) * 4 = 10240 * 4.
  o = parse_perf_args(3, std::vector<const char*>{"perf", "--model", "deepseek-v2-lite"}.data());
  CHECK(bytes_per_token({forward_scatter(o), forward_gather(o)}, o.head_dim, 4) == 40960);
  // Its rows at N = 8 in BF16 (20480 bytes per token), 64 KiB: B = 1, S = floor(8 * 65536 / 20480) = 25, the
  // first rank holds ceil(25 / 8) = 4 tokens = 81920 bytes; B = 8, S = floor(8 * 65536 / (8 * 20480)) = 3,
  // Ulysses' first rank one token of each of 8 sequences = 163840 bytes (BASP, K = 1: 3 tokens of one sequence).
  const std::vector<RowShape> rows = shape_rows({65536}, {1, 8}, 8, 20480, 2, Mode::kBoth);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].seq_len == 25);
  CHECK(rows[0].bytes == 81920);
  CHECK(rows[0].count == 40960);
  CHECK(rows[1].seq_len == 3);
  CHECK(rows[1].bytes == 163840);
  // Overflow in one tensor's heads x head size, or in the sum, is an error.
  const std::vector<Exchange> wide{{Direction::kScatter, {{"Q", int64_t{1} << 20, 0, int64_t{1} << 21}}}};
  CHECK_THAT(std::string([&] {
               try {
                 bytes_per_token(wide, 1, 1);
               } catch (const ArgError& e) {
                 return std::string(e.what());
               }
               return std::string("(no error)");
             }()),
             Contains("Q's heads * head size"));
  const std::vector<Exchange> many{{Direction::kScatter,
                                    {{"Q", int64_t{1} << 20, 0, int64_t{1} << 19},
                                     {"K", int64_t{1} << 20, 0, int64_t{1} << 19},
                                     {"V", int64_t{1} << 20, 0, int64_t{1} << 19}}}};
  CHECK_THROWS_AS(bytes_per_token(many, 1, 1), ArgError);
}

TEST_CASE("split_begin and split_count follow torch.tensor_split", "[bench][shape]") {
  for (int64_t items : {0, 1, 5, 7, 8, 13, 100}) {
    for (int64_t parts : {1, 2, 3, 8}) {
      int64_t at = 0;
      for (int64_t j = 0; j < parts; ++j) {
        // tensor_split: the first items % parts parts get one more.
        const int64_t count = items / parts + (j < items % parts ? 1 : 0);
        CHECK(split_begin(items, parts, j) == at);
        CHECK(split_count(items, parts, j) == count);
        at += count;
      }
      CHECK(split_begin(items, parts, parts) == items);
    }
  }
}

TEST_CASE("mode_groups and max_rank_tokens", "[bench][shape]") {
  CHECK(mode_groups(Mode::kBoth, 8, 4) == std::vector<int64_t>{1, 4});
  CHECK(mode_groups(Mode::kBasp, 8, 6) == std::vector<int64_t>{2});
  CHECK(mode_groups(Mode::kUlysses, 8, 6) == std::vector<int64_t>{1});
  CHECK(max_rank_tokens(21, 2, 1, 8) == 2 * 3);  // Ulysses: 21 tokens over 8 ranks, 3 on the first
  CHECK(max_rank_tokens(21, 2, 2, 8) == 1 * 6);  // G = 2, K = 4: one sequence each, 6 tokens on the first
  CHECK(max_rank_tokens(3, 1, 1, 8) == 1);       // S < K: some ranks hold none, none holds more than one
}

TEST_CASE("shape_rows derives S from the mean bytes per rank, without rounding it", "[bench][shape]") {
  const int64_t token = 48 * 128 * 2;  // Q, K, V with Hq = 32, Hkv = 8, D = 128, bf16
  const int64_t n = 8;
  const std::vector<int64_t> sizes{1024, 1 << 20, 64 << 20, (64 << 20) + 1};
  const std::vector<RowShape> rows = shape_rows(sizes, {1, 2, 4, 8}, n, token, 2, Mode::kBoth);
  int64_t last_b = -1, last_s = -1;
  bool uneven = false;
  for (const RowShape& r : rows) {
    INFO("B " << r.micro_batch << " S " << r.seq_len);
    CHECK(r.seq_len >= 1);
    uneven = uneven || r.seq_len % n != 0;
    // The size column is the largest rank's bytes over both modes (Ulysses' here: B sequences of ceil(S / N)).
    const int64_t most = std::max(max_rank_tokens(r.seq_len, r.micro_batch, 1, n),
                                  max_rank_tokens(r.seq_len, r.micro_batch, std::gcd(n, r.micro_batch), n));
    CHECK(r.bytes == most * token);
    CHECK(r.count * 2 == r.bytes);
    // The mean over the ranks is never more than asked for, except the one-token minimum (S = 1).
    CHECK((r.micro_batch * r.seq_len * token <= n * ((64 << 20) + 1) || r.seq_len == 1));
    // Sizes that give the same S are measured once.
    CHECK(!(r.micro_batch == last_b && r.seq_len == last_s));
    last_b = r.micro_batch;
    last_s = r.seq_len;
  }
  CHECK(uneven);
  // Each size alone: the mean bytes per rank B * S * token / N is the largest not above it (S >= 1 aside).
  for (int64_t size : {int64_t{100000}, int64_t{1} << 20, int64_t{3} << 20, int64_t{64} << 20}) {
    for (int64_t b : {1, 2, 3, 4, 8}) {
      const std::vector<RowShape> one = shape_rows({size}, {b}, n, token, 2, Mode::kBoth);
      REQUIRE(one.size() == 1);
      INFO("size " << size << " B " << b << " S " << one[0].seq_len);
      CHECK(b * one[0].seq_len * token <= n * size);
      CHECK(b * (one[0].seq_len + 1) * token > n * size);
    }
  }
  // 64 MiB at B = 2: 8 * 64 MiB / (2 * 12 KiB) = 21845.3 -> S = 21845, not a multiple of 8 (the rounding of earlier
  // versions gave 8 * 2730 = 21840); the first rank of each group holds 2731 tokens of each of 2 sequences.
  const auto it = std::find_if(rows.begin(), rows.end(),
                               [](const RowShape& r) { return r.micro_batch == 2 && r.seq_len == 21845; });
  REQUIRE(it != rows.end());
  CHECK(it->bytes == 2 * 2731 * token);
  // 1 KiB is below one token: it becomes the minimum S = 1, one token on each rank that holds any.
  CHECK(rows.front().seq_len == 1);
  CHECK(rows.front().bytes == token);
  // BASP alone at B = 8 (K = 1): every rank holds whole sequences, S tokens of each.
  const std::vector<RowShape> basp = shape_rows({1 << 20}, {8}, n, token, 2, Mode::kBasp);
  REQUIRE(basp.size() == 1);
  CHECK(basp[0].bytes == basp[0].seq_len * token);
}

TEST_CASE("shape_rows rejects a minimum shape beyond the size bound", "[bench][shape]") {
  CHECK_THROWS_WITH(shape_rows({1024}, {int64_t{1} << 30}, 8, 1 << 20, 2, Mode::kBoth), Contains("-B (1073741824)"));
}

TEST_CASE("thd_rows: one row per B holding every document's tokens", "[bench][shape]") {
  const std::vector<RowShape> rows = thd_rows({1, 4}, {5, 1, 4000});
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].micro_batch == 1);
  CHECK(rows[1].micro_batch == 4);
  CHECK(rows[1].seq_len == 4006);
}
