#include "perf_check.h"

#include <cstring>
#include <initializer_list>

namespace basp::bench {
namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// One hash per (tensor, sequence, token, head); the dim index is mixed in per element.
uint64_t row_key(uint64_t seed, int64_t tensor, int64_t seq, int64_t token, int64_t head) {
  uint64_t x = mix64(seed ^ 0x9e3779b97f4a7c15ull);
  for (int64_t v : {tensor, seq, token, head}) x = mix64(x + static_cast<uint64_t>(v) * 0xd6e8feb86659fd93ull);
  return x;
}

uint64_t element_bits(uint64_t key, int64_t d) {
  return mix64(key + static_cast<uint64_t>(d + 1) * 0x9e3779b97f4a7c15ull);
}

// Calls f(element offset, expected bits) for every element of the shard, in memory order of its rows.
template <typename F>
void for_each_element(const Shard& sh, uint64_t seed, int64_t tensor_id, F&& f) {
  for (int64_t b = 0; b < sh.num_sequences; ++b) {
    for (int64_t s = 0; s < sh.tokens; ++s) {
      for (int64_t h = 0; h < sh.heads; ++h) {
        const uint64_t key = row_key(seed, tensor_id, sh.first_sequence + b, sh.token_begin + s, sh.head_begin + h);
        const int64_t base = sh.index(b, s, h, 0);
        for (int64_t d = 0; d < sh.head_dim; ++d) f(base + d, element_bits(key, d));
      }
    }
  }
}

}  // namespace

Shard seq_shard(const basp_rank_info_t& info, basp_layout_t layout, int64_t elem, int64_t head_dim, int64_t heads) {
  Shard s;
  s.layout = layout;
  s.elem = elem;
  s.head_dim = head_dim;
  s.first_sequence = info.first_sequence;
  s.num_sequences = info.num_sequences;
  s.token_begin = info.token_begin;
  s.tokens = info.token_end - info.token_begin;
  s.head_begin = 0;
  s.heads = heads;
  return s;
}

Shard head_shard(const basp_rank_info_t& info, basp_layout_t layout, int64_t elem, int64_t head_dim, int64_t heads) {
  Shard s = seq_shard(info, layout, elem, head_dim, heads);
  s.token_begin = 0;
  s.tokens = info.seq_len;
  s.heads = heads / info.group_size;
  s.head_begin = info.group_position * s.heads;
  return s;
}

void fill_expected(const Shard& shard, uint64_t seed, int64_t tensor_id, void* data) {
  auto* out = static_cast<unsigned char*>(data);
  const size_t elem = static_cast<size_t>(shard.elem);
  for_each_element(shard, seed, tensor_id,
                   [&](int64_t i, uint64_t bits) { std::memcpy(out + static_cast<size_t>(i) * elem, &bits, elem); });
}

int64_t count_wrong(const Shard& shard, uint64_t seed, int64_t tensor_id, const void* data) {
  const auto* in = static_cast<const unsigned char*>(data);
  const size_t elem = static_cast<size_t>(shard.elem);
  int64_t wrong = 0;
  for_each_element(shard, seed, tensor_id, [&](int64_t i, uint64_t bits) {
    if (std::memcmp(in + static_cast<size_t>(i) * elem, &bits, elem) != 0) ++wrong;
  });
  return wrong;
}

}  // namespace basp::bench
