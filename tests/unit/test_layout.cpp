// The index math checked against the plain coordinate formulas, and a whole group's scatter/gather run in
// one process with the host copies (K virtual ranks), bit-exact on data that is a function of coordinates.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "layout/geometry.h"
#include "layout/host_copy.h"
#include "pattern.h"

using basp::layout::Geometry;
using basp::test::kPoison;
using basp::test::pattern_byte;

namespace {

struct Coord {
  int64_t b, s;  // local sequence, token inside the rank's shard
};

// Row r of a chunk -> (local sequence, local token), following the layout's order.
Coord row_coord(const Geometry& g, int64_t r) {
  if (g.layout == BASP_LAYOUT_BSHD) return {r / g.s_loc, r % g.s_loc};
  return {r % g.b_loc, r / g.b_loc};
}

// Plain formulas, in elements.
int64_t seq_index(const Geometry& g, int64_t b, int64_t s, int64_t h, int64_t d) {
  if (g.layout == BASP_LAYOUT_BSHD) return ((b * g.s_loc + s) * g.heads + h) * g.head_dim + d;
  return ((s * g.b_loc + b) * g.heads + h) * g.head_dim + d;
}
int64_t head_index(const Geometry& g, int64_t b, int64_t s_full, int64_t h, int64_t d) {
  const int64_t hk = g.heads_per_rank();
  if (g.layout == BASP_LAYOUT_BSHD) return ((b * g.seq_len() + s_full) * hk + h) * g.head_dim + d;
  return ((s_full * g.b_loc + b) * hk + h) * g.head_dim + d;
}

Geometry random_geometry(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Geometry g;
  g.layout = static_cast<int32_t>(pick(0, 1));
  g.k = pick(1, 6);
  g.b_loc = pick(1, 3);
  g.s_loc = pick(1, 5);
  g.heads = g.k * pick(1, 3);
  g.head_dim = pick(1, 9);
  const int64_t sizes[] = {1, 2, 4, 8};
  g.elem = sizes[pick(0, 3)];
  return g;
}

// Rank l's sequence-sharded input: tokens [l*s_loc, (l+1)*s_loc) of every local sequence, all heads, each byte a
// function of its global coordinates.
void fill_seq_pattern(const Geometry& g, uint64_t seed, int64_t l, std::byte* seq) {
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t s = 0; s < g.s_loc; ++s)
      for (int64_t h = 0; h < g.heads; ++h)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            seq[seq_index(g, b, s, h, d) * g.elem + e] = std::byte{pattern_byte(seed, 0, b, l * g.s_loc + s, h, d, e)};
}

// Rank l's head-sharded output must hold heads [l*H/K, (l+1)*H/K) of every token of every local sequence.
void require_head_pattern(const Geometry& g, uint64_t seed, int64_t l, const std::byte* head) {
  const int64_t hk = g.heads_per_rank();
  for (int64_t b = 0; b < g.b_loc; ++b)
    for (int64_t s = 0; s < g.seq_len(); ++s)
      for (int64_t h = 0; h < hk; ++h)
        for (int64_t d = 0; d < g.head_dim; ++d)
          for (int64_t e = 0; e < g.elem; ++e)
            REQUIRE(head[head_index(g, b, s, h, d) * g.elem + e] ==
                    std::byte{pattern_byte(seed, 0, b, s, l * hk + h, d, e)});
}

}  // namespace

TEST_CASE("row offsets equal the coordinate formulas", "[layout]") {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const Geometry g = random_geometry(rng);
    const int64_t hk = g.heads_per_rank();
    for (int64_t j = 0; j < g.k; ++j) {
      for (int64_t r = 0; r < g.rows(); ++r) {
        const Coord c = row_coord(g, r);
        REQUIRE(g.seq_row_offset(r, j) == seq_index(g, c.b, c.s, j * hk, 0) * g.elem);
        REQUIRE(g.head_row_offset(r, j) == head_index(g, c.b, j * g.s_loc + c.s, 0, 0) * g.elem);
        REQUIRE(g.wire_row_offset(r) == r * hk * g.head_dim * g.elem);
      }
    }
    REQUIRE(g.chunk_bytes() * g.k == g.tensor_bytes());
  }
}

TEST_CASE("a whole group through the host copies: scatter then gather, bit-exact", "[layout]") {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    const Geometry g = random_geometry(rng);
    const uint64_t seed = rng();
    const int64_t k = g.k;
    const int64_t bytes = g.tensor_bytes();
    // Rank l of the group holds tokens [l*s_loc, (l+1)*s_loc) of every local sequence, all heads.
    std::vector<std::vector<std::byte>> seq(k, std::vector<std::byte>(bytes));
    for (int64_t l = 0; l < k; ++l) fill_seq_pattern(g, seed, l, seq[l].data());
    // Scatter: each sender packs a chunk per peer; each receiver places it; own slice copied directly.
    std::vector<std::vector<std::byte>> head(k, std::vector<std::byte>(bytes, std::byte{kPoison}));
    std::vector<std::byte> wire(g.chunk_bytes());
    for (int64_t sender = 0; sender < k; ++sender) {
      for (int64_t receiver = 0; receiver < k; ++receiver) {
        if (sender == receiver) {
          basp::layout::copy_seq_to_head(g, seq[sender].data(), head[receiver].data(), receiver);
          continue;
        }
        std::fill(wire.begin(), wire.end(), std::byte{kPoison});
        basp::layout::pack_seq_rows(g, seq[sender].data(), wire.data(), receiver);
        for (int64_t r = 0; r < g.rows(); ++r)
          std::memcpy(head[receiver].data() + g.head_row_offset(r, sender), wire.data() + g.wire_row_offset(r),
                      static_cast<size_t>(g.row_bytes()));
      }
    }
    for (int64_t l = 0; l < k; ++l) require_head_pattern(g, seed, l, head[l].data());
    // Gather: the exact inverse restores every sender's input.
    std::vector<std::vector<std::byte>> back(k, std::vector<std::byte>(bytes, std::byte{kPoison}));
    for (int64_t sender = 0; sender < k; ++sender) {
      for (int64_t receiver = 0; receiver < k; ++receiver) {
        if (sender == receiver) {
          basp::layout::copy_head_to_seq(g, head[sender].data(), back[receiver].data(), receiver);
          continue;
        }
        std::fill(wire.begin(), wire.end(), std::byte{kPoison});
        for (int64_t r = 0; r < g.rows(); ++r)
          std::memcpy(wire.data() + g.wire_row_offset(r), head[sender].data() + g.head_row_offset(r, receiver),
                      static_cast<size_t>(g.row_bytes()));
        basp::layout::unpack_seq_rows(g, wire.data(), back[receiver].data(), sender);
      }
    }
    for (int64_t l = 0; l < k; ++l) REQUIRE(back[l] == seq[l]);
  }
}

// The group-wide row-major copies of the shared-memory and staging paths, against the same coordinate function:
// every rank's input through scatter_rows_group (or pack_seq_rows_group + unpack_head_rows) and back through
// gather_rows_group (or pack_head_rows + unpack_seq_rows_group), with and without streaming stores, on buffers
// offset by 0 or 8 bytes so that both the streaming and the memcpy fallback run.
TEST_CASE("group-wide row-major copies: scatter then gather, bit-exact", "[layout]") {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 240; ++trial) {
    Geometry g = random_geometry(rng);
    if (trial % 3 == 0) g.head_dim = 8 * g.k;  // rows that are multiples of 16 bytes: the streaming stores run
    const uint64_t seed = rng();
    const bool streaming = trial % 2 == 0;
    const bool staged = trial % 4 >= 2;
    const size_t shift = (trial / 4) % 2 == 0 ? 0 : 8;
    const int64_t k = g.k;
    const auto bytes = static_cast<size_t>(g.tensor_bytes());
    auto buffers = [&](std::byte fill) {
      std::vector<std::vector<std::byte>> v(k, std::vector<std::byte>(bytes + 16 + shift, fill));
      return v;
    };
    auto at = [&](std::vector<std::byte>& v) {
      // 16-byte aligned base (vector storage is), shifted by `shift`.
      auto p = reinterpret_cast<uintptr_t>(v.data());
      return reinterpret_cast<std::byte*>((p + 15) / 16 * 16 + shift);
    };
    auto seq = buffers(std::byte{0});
    for (int64_t l = 0; l < k; ++l) fill_seq_pattern(g, seed, l, at(seq[l]));
    auto head = buffers(std::byte{kPoison});
    std::vector<std::byte*> heads(k);
    for (int64_t l = 0; l < k; ++l) heads[l] = at(head[l]);
    auto wire = buffers(std::byte{kPoison});  // staging: rank l's region, one packed chunk per peer
    std::vector<std::byte*> chunks(k);
    for (int64_t l = 0; l < k; ++l) {
      if (staged) {
        for (int64_t j = 0; j < k; ++j) chunks[j] = at(wire[l]) + j * g.chunk_bytes();
        basp::layout::pack_seq_rows_group(g, at(seq[l]), chunks.data(), heads[l], l, streaming);
      } else {
        basp::layout::scatter_rows_group(g, at(seq[l]), heads.data(), l, streaming);
      }
    }
    if (staged) {
      for (int64_t l = 0; l < k; ++l)
        for (int64_t j = 0; j < k; ++j)
          if (j != l) basp::layout::unpack_head_rows(g, at(wire[j]) + l * g.chunk_bytes(), heads[l], j);
    }
    for (int64_t l = 0; l < k; ++l) require_head_pattern(g, seed, l, heads[l]);
    auto back = buffers(std::byte{kPoison});
    for (auto& v : wire) std::fill(v.begin(), v.end(), std::byte{kPoison});
    if (staged) {
      for (int64_t l = 0; l < k; ++l)
        for (int64_t j = 0; j < k; ++j)
          if (j != l) basp::layout::pack_head_rows(g, heads[l], at(wire[l]) + j * g.chunk_bytes(), j);
    }
    for (int64_t l = 0; l < k; ++l) {
      if (staged) {
        for (int64_t j = 0; j < k; ++j) chunks[j] = at(wire[j]) + l * g.chunk_bytes();
        basp::layout::unpack_seq_rows_group(g, chunks.data(), heads[l], at(back[l]), l, streaming);
      } else {
        basp::layout::gather_rows_group(g, heads.data(), at(back[l]), l, streaming);
      }
    }
    for (int64_t l = 0; l < k; ++l) REQUIRE(std::memcmp(at(back[l]), at(seq[l]), bytes) == 0);
  }
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
