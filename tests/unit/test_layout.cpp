// The index math checked against the plain coordinate formulas, and a whole group's scatter/gather run in one
// process with the host copies (K virtual ranks), bit-exact on data that is a function of coordinates: uneven
// tokens and heads (tensor_split), GQA routing with replicated KV heads (whose gather sums), every layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "layout/geometry.h"
#include "layout/host_copy.h"
#include "layout/sum_rows.h"
#include "pattern.h"
#include "split_reference.h"

using basp::layout::Geometry;
using basp::layout::RowPlace;
using basp::test::HeadRange;
using basp::test::kPoison;
using basp::test::pattern_byte;
using basp::test::split_bounds;

namespace {

using Ref = basp::test::GeometryRef<Geometry>;

Geometry random_geometry(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Geometry g;
  g.layout = static_cast<int32_t>(pick(0, 2));
  g.k = pick(1, 8);
  g.b_loc = g.layout == BASP_LAYOUT_THD ? 1 : pick(1, 3);
  g.seq_len = pick(1, 3 * g.k + 2);  // also S < K and S not a multiple of K
  g.head_dim = pick(1, 9);
  const int64_t sizes[] = {1, 2, 4, 8};
  g.elem = sizes[pick(0, 3)];
  if (pick(0, 1) == 0) {
    g.heads = pick(1, 2 * g.k + 1);  // query-like, any count
    g.split_heads = g.heads;
  } else {
    g.heads = pick(1, 4);  // KV heads serving r query heads each, MQA included
    g.split_heads = g.heads * pick(1, 8);
  }
  return g;
}

void fill_seq(const Ref& ref, uint64_t seed, int64_t l, std::byte* seq) {
  const Geometry& g = ref.g;
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t s = 0; s < ref.tc(l); ++s)
      for (int64_t h = 0; h < g.heads; ++h)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            seq[ref.seq_index(l, b, s, h, d) * g.elem + e] =
                std::byte{pattern_byte(seed, 0, b, ref.tok[l] + s, h, d, e)};
}

void require_head(const Ref& ref, uint64_t seed, int64_t m, const std::byte* head) {
  const Geometry& g = ref.g;
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t s = 0; s < g.seq_len; ++s)
      for (int64_t i = 0; i < ref.hc(m); ++i)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            REQUIRE(head[ref.head_index(m, b, s, i, d) * g.elem + e] ==
                    std::byte{pattern_byte(seed, 0, b, s, ref.heads[m].begin + i, d, e)});
}

// The contribution of holder m to head h at (b, s, d) in a summing gather: a small integer, so every sum of up to
// 8 of them is exact in every summable type, whatever the order.
int32_t contribution(uint64_t seed, int64_t m, int64_t b, int64_t s, int64_t h, int64_t d) {
  return static_cast<int32_t>(pattern_byte(seed, m, b, s, h, d, 0) % 17) - 8;
}

void write_value(int32_t dtype, std::byte* p, int32_t v) { basp::test::write_small_int(dtype, p, v); }

int64_t elem_of(int32_t dtype) { return dtype == BASP_DTYPE_FP64 ? 8 : dtype == BASP_DTYPE_FP32 ? 4 : 2; }

}  // namespace

TEST_CASE("splits, head ranges and row offsets equal the coordinate formulas", "[layout]") {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    const Geometry base = random_geometry(rng);
    const Ref ref(base);
    INFO("trial " << trial << " layout " << base.layout << " K " << base.k << " S " << base.seq_len << " H "
                  << base.heads << "/" << base.split_heads);
    for (int64_t j = 0; j < base.k; ++j) {
      REQUIRE(base.tok_begin(j) == ref.tok[j]);
      REQUIRE(base.tok_count(j) == ref.tc(j));
      REQUIRE(base.head_begin(j) == ref.heads[j].begin);
      REQUIRE(base.head_end(j) == ref.heads[j].end);
    }
    bool replicated = false;
    for (int64_t h = 0; h < base.heads; ++h) {
      int64_t first = -1, last = -1;
      for (int64_t j = 0; j < base.k; ++j) {
        if (!ref.heads[j].holds(h)) continue;
        if (first < 0) first = j;
        if (last >= 0) REQUIRE(j == last + 1);  // holders are consecutive
        last = j;
      }
      REQUIRE(first >= 0);  // every head is held
      REQUIRE(base.first_holder(h) == first);
      REQUIRE(base.last_holder(h) == last);
      replicated = replicated || first != last;
    }
    REQUIRE(base.replicated() == replicated);
    for (int64_t me = 0; me < base.k; ++me) {
      const Geometry g = base.seen_from(me);
      REQUIRE(g.seq_tensor_bytes(me) == ref.seq_bytes(me));
      REQUIRE(g.head_tensor_bytes(me) == ref.head_bytes(me));
      for (int64_t j = 0; j < g.k; ++j) {
        for (int64_t r = 0; r < g.seq_rows(me); ++r) {
          const int64_t b = !ref.token_major() ? r / ref.tc(me) : r % g.b_loc;
          const int64_t s = !ref.token_major() ? r % ref.tc(me) : r / g.b_loc;
          REQUIRE(g.seq_row_offset(r, j) == ref.seq_index(me, b, s, ref.heads[j].begin, 0) * g.elem);
        }
        // me's head side, the rows of sequence position j.
        for (int64_t r = 0; r < g.seq_rows(j); ++r) {
          const int64_t b = !ref.token_major() ? r / ref.tc(j) : r % g.b_loc;
          const int64_t s = !ref.token_major() ? r % ref.tc(j) : r / g.b_loc;
          REQUIRE(g.head_row_offset(me, j, r) == ref.head_index(me, b, ref.tok[j] + s, 0, 0) * g.elem);
        }
      }
    }
  }
}

// Every rank's input through scatter_rows (straight into the peers' head tensors) or staged (packed chunks, then
// unpack_head_rows), then back: gather_rows restores the input where nothing is replicated, and sums the
// holders' contributions where heads are replicated, with and without streaming stores, on buffers offset by 0
// or 8 bytes so that both the streaming and the memcpy fallback run; the gather in head chunks equals it.
TEST_CASE("a whole group through the host copies: scatter, gather and the summing gather", "[layout]") {
  std::mt19937_64 rng(4242);
  const int32_t summable[] = {BASP_DTYPE_FP16, BASP_DTYPE_BF16, BASP_DTYPE_FP32, BASP_DTYPE_FP64};
  for (int trial = 0; trial < 400; ++trial) {
    Geometry g = random_geometry(rng);
    if (trial % 3 == 0) g.head_dim = 8 * g.k;  // rows that are multiples of 16 bytes: the streaming stores run
    if (trial < 3) {  // a group larger than the copies' per-position cache (64): worked out on the fly
      g.k = 70;
      g.seq_len = 75;
      g.head_dim = 2;
      g.b_loc = g.layout == BASP_LAYOUT_THD ? 1 : 2;
      const int64_t heads[] = {3, 2, 1};
      const int64_t split[] = {3, 140, 140};  // the last: MQA, one head with 70 holders (FP32: exact sums)
      g.heads = heads[trial];
      g.split_heads = split[trial];
    }
    const int32_t dtype = summable[trial % 4];
    if (g.replicated()) g.elem = elem_of(dtype);
    const Ref ref(g);
    const uint64_t seed = rng();
    const bool streaming = trial % 2 == 0;
    const bool staged = trial % 4 >= 2;
    const size_t shift = (trial / 4) % 2 == 0 ? 0 : 8;
    const int64_t k = g.k;
    INFO("trial " << trial << " layout " << g.layout << " K " << k << " S " << g.seq_len << " H " << g.heads << "/"
                  << g.split_heads << " staged " << staged);
    auto buffer = [&](int64_t bytes, std::byte fill) { return std::vector<std::byte>(bytes + 16 + shift, fill); };
    auto at = [&](std::vector<std::byte>& v) {
      auto p = reinterpret_cast<uintptr_t>(v.data());
      return reinterpret_cast<std::byte*>((p + 15) / 16 * 16 + shift);
    };
    std::vector<std::vector<std::byte>> seq, head, back, wire;
    int64_t max_chunk = 0;
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) max_chunk = std::max(max_chunk, g.chunk_bytes(a, b));
    for (int64_t l = 0; l < k; ++l) {
      seq.push_back(buffer(ref.seq_bytes(l), std::byte{0}));
      head.push_back(buffer(ref.head_bytes(l), std::byte{kPoison}));
      back.push_back(buffer(ref.seq_bytes(l), std::byte{kPoison}));
      wire.push_back(buffer(k * max_chunk, std::byte{kPoison}));  // rank l's region: one chunk slot per peer
      fill_seq(ref, seed, l, at(seq[l]));
    }
    std::vector<RowPlace> places(k);
    // Scatter.
    for (int64_t l = 0; l < k; ++l) {
      const Geometry me = g.seen_from(l);
      for (int64_t j = 0; j < k; ++j) {
        places[j] = staged && j != l ? RowPlace{at(wire[l]) + j * max_chunk, false} : RowPlace{at(head[j]), true};
      }
      basp::layout::scatter_rows(me, at(seq[l]), places.data(), streaming);
    }
    if (staged) {
      for (int64_t m = 0; m < k; ++m)
        for (int64_t l = 0; l < k; ++l)
          if (l != m) basp::layout::unpack_head_rows(g.seen_from(m), at(wire[l]) + m * max_chunk, at(head[m]), l);
    }
    for (int64_t m = 0; m < k; ++m) require_head(ref, seed, m, at(head[m]));
    // Gather. With replicated heads, every holder's head tensor first gets its own contributions.
    const bool summing = g.replicated();
    if (summing) {
      for (int64_t m = 0; m < k; ++m)
        for (int64_t b = 0; b < g.b_loc; ++b)
          for (int64_t s = 0; s < g.seq_len; ++s)
            for (int64_t i = 0; i < ref.hc(m); ++i)
              for (int64_t d = 0; d < g.head_dim; ++d)
                write_value(dtype, at(head[m]) + ref.head_index(m, b, s, i, d) * g.elem,
                            contribution(seed, m, b, s, ref.heads[m].begin + i, d));
    }
    for (auto& v : wire) std::fill(v.begin(), v.end(), std::byte{kPoison});
    if (staged) {
      for (int64_t m = 0; m < k; ++m)
        for (int64_t l = 0; l < k; ++l)
          if (l != m) basp::layout::pack_head_rows(g.seen_from(m), at(head[m]), at(wire[m]) + l * max_chunk, l);
    }
    for (int64_t l = 0; l < k; ++l) {
      for (int64_t j = 0; j < k; ++j) {
        places[j] = staged && j != l ? RowPlace{at(wire[j]) + l * max_chunk, false} : RowPlace{at(head[j]), true};
      }
      basp::layout::gather_rows(g.seen_from(l), places.data(), at(back[l]), dtype, streaming);
    }
    // The same gather in head chunks (plan/head_chunks.h) run in order over the same head tensors: bit for bit the
    // whole gather's, a head several positions hold summed in the chunk of its last contribution.
    const int64_t most = (g.split_heads + k - 1) / k;
    for (const int64_t count : {int64_t{2}, most}) {
      if (count < 2 || count > most) continue;
      INFO("head chunks: " << count);
      std::vector<std::vector<std::byte>> chunked;
      for (int64_t l = 0; l < k; ++l) chunked.push_back(buffer(ref.seq_bytes(l), std::byte{0x5A}));
      for (int64_t j = 0; j < k; ++j) places[j] = RowPlace{at(head[j]), true};
      for (int64_t c = 0; c < count; ++c) {
        for (int64_t l = 0; l < k; ++l) {
          const Geometry me = g.seen_from(l).chunk(static_cast<int32_t>(c), static_cast<int32_t>(count), true);
          basp::layout::gather_rows(me, places.data(), at(chunked[l]), dtype, streaming);
        }
      }
      for (int64_t l = 0; l < k; ++l)
        REQUIRE(std::memcmp(at(chunked[l]), at(back[l]), static_cast<size_t>(ref.seq_bytes(l))) == 0);
    }
    for (int64_t l = 0; l < k; ++l) {
      if (!summing) {
        REQUIRE(std::memcmp(at(back[l]), at(seq[l]), static_cast<size_t>(ref.seq_bytes(l))) == 0);
        continue;
      }
      std::vector<std::byte> expected(static_cast<size_t>(g.elem));
      for (int64_t b = 0; b < g.b_loc; ++b)
        for (int64_t s = 0; s < ref.tc(l); ++s)
          for (int64_t h = 0; h < g.heads; ++h)
            for (int64_t d = 0; d < g.head_dim; ++d) {
              int32_t sum = 0;
              for (int64_t m = 0; m < k; ++m) {
                if (ref.heads[m].holds(h)) sum += contribution(seed, m, b, ref.tok[l] + s, h, d);
              }
              write_value(dtype, expected.data(), sum);
              REQUIRE(std::memcmp(at(back[l]) + ref.seq_index(l, b, s, h, d) * g.elem, expected.data(),
                                  static_cast<size_t>(g.elem)) == 0);
            }
    }
  }
}

TEST_CASE("the summing gather adds in ascending position, in FP32 for 16-bit types", "[layout]") {
  // 1e8 + 1 - 1e8 in FP32, left to right: 1e8 + 1 rounds to 1e8, the sum is 0 (right to left it would be 1).
  const float f[] = {1e8f, 1.0f, -1e8f};
  const unsigned char* src[] = {reinterpret_cast<const unsigned char*>(&f[0]),
                                reinterpret_cast<const unsigned char*>(&f[1]),
                                reinterpret_cast<const unsigned char*>(&f[2])};
  float out = -1.0f;
  basp::layout::sum_elements(
      BASP_DTYPE_FP32, reinterpret_cast<unsigned char*>(&out), [&](int32_t c) { return src[c]; }, 3, 1);
  CHECK(out == 0.0f);
  // FP16 2048 + 1 + 1: in FP16 steps 2048 + 1 would round back to 2048 twice; in FP32 the sum is 2050 (exact in FP16).
  const uint16_t h[] = {0x6800, 0x3c00, 0x3c00};  // 2048, 1, 1
  const unsigned char* hs[] = {reinterpret_cast<const unsigned char*>(&h[0]),
                               reinterpret_cast<const unsigned char*>(&h[1]),
                               reinterpret_cast<const unsigned char*>(&h[2])};
  uint16_t hout = 0;
  basp::layout::sum_elements(
      BASP_DTYPE_FP16, reinterpret_cast<unsigned char*>(&hout), [&](int32_t c) { return hs[c]; }, 3, 1);
  CHECK(hout == 0x6801);  // 2050
}

TEST_CASE("FP16 and BF16 conversions round to nearest even", "[layout]") {
  using basp::layout::float_to_bf16;
  using basp::layout::float_to_half;
  using basp::layout::half_to_float;
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);            // rounds to infinity
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3c00);  // halfway: to even
  CHECK(float_to_half(1.0f + 3.0f / 2048) == 0x3c02);  // halfway: to even (up)
  CHECK(float_to_half(5.9604645e-8f) == 0x0001);       // the smallest subnormal
  CHECK(float_to_half(2.9802322e-8f) == 0x0000);       // half of it: to even (zero)
  CHECK(float_to_half(6.1035156e-5f) == 0x0400);       // the smallest normal
  CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7c00) == 0x7c00);
  CHECK(half_to_float(0x0001) == 5.9604645e-8f);
  CHECK(half_to_float(0x3555) == 0.33325195f);
  CHECK(half_to_float(0xfc00) == -std::numeric_limits<float>::infinity());
  for (uint32_t x = 0; x < 0x10000; ++x) {  // every finite half survives the round trip
    const auto v = static_cast<uint16_t>(x);
    if ((v & 0x7c00) == 0x7c00) continue;
    REQUIRE(float_to_half(half_to_float(v)) == v);
  }
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);  // halfway: to even
  CHECK(float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
  CHECK(basp::layout::bf16_to_float(0x4049) == 3.140625f);
}

TEST_CASE("copy_streaming copies like memcpy, aligned or not", "[layout]") {
  std::vector<std::byte> src(300), dst(320);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(static_cast<unsigned char>(i * 7 + 1));
  for (size_t off : {size_t{0}, size_t{1}, size_t{16}}) {
    for (size_t n : {size_t{0}, size_t{16}, size_t{48}, size_t{64}, size_t{80}, size_t{256}, size_t{255}}) {
      std::fill(dst.begin(), dst.end(), std::byte{kPoison});
      auto base = reinterpret_cast<uintptr_t>(dst.data());
      auto* d = reinterpret_cast<std::byte*>((base + 15) / 16 * 16 + off);
      basp::layout::copy_streaming(d, src.data(), n);
      basp::layout::stream_fence();
      REQUIRE(std::memcmp(d, src.data(), n) == 0);
      REQUIRE(d[n] == std::byte{kPoison});
      if (d > dst.data()) REQUIRE(d[-1] == std::byte{kPoison});
    }
  }
}
