#include "perf_check.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "perf_shape.h"

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

// The summed gather's data: holder p's contribution to element (row key, d), in [-amplitude, amplitude).
int64_t contribution(uint64_t key, int64_t d, int64_t holder, int64_t amplitude) {
  const uint64_t x = element_bits(key ^ mix64(static_cast<uint64_t>(holder) + 0x5851f42d4c957f2dull), d);
  return static_cast<int64_t>(x % static_cast<uint64_t>(2 * amplitude)) - amplitude;
}

// Calls f(element offset, row key, d, global head) for every element of the shard, in memory order of its rows.
template <typename F>
void for_each_element(const Shard& sh, uint64_t seed, int64_t tensor_id, F&& f) {
  for (int64_t b = 0; b < sh.num_sequences; ++b) {
    for (int64_t s = 0; s < sh.tokens; ++s) {
      for (int64_t h = 0; h < sh.heads; ++h) {
        const uint64_t key = row_key(seed, tensor_id, sh.first_sequence + b, sh.token_begin + s, sh.head_begin + h);
        const int64_t base = sh.index(b, s, h, 0);
        for (int64_t d = 0; d < sh.head_dim; ++d) f(base + d, key, d, sh.head_begin + h);
      }
    }
  }
}

bool follows_own_split(int64_t heads, int64_t query_heads) { return query_heads == 0 || query_heads == heads; }

}  // namespace

RankPlace rank_place(const basp_rank_info_t& info, basp_layout_t layout, int64_t seq_len) {
  RankPlace p;
  p.layout = layout;
  p.group_size = info.group_size;
  p.position = info.group_position;
  p.first_sequence = info.first_sequence;
  p.num_sequences = info.num_sequences;
  p.seq_len = seq_len;
  return p;
}

RankPlace rank_place(const basp_doc_assignment_t& a) {
  RankPlace p;
  p.layout = BASP_LAYOUT_THD;
  p.group_size = a.group_size;
  p.position = a.group_position;
  p.first_sequence = a.group_index;
  p.num_sequences = 1;
  p.seq_len = a.stream_tokens;
  return p;
}

HeadRange head_range(int64_t k, int64_t j, int64_t heads, int64_t query_heads) {
  if (follows_own_split(heads, query_heads)) return {split_begin(heads, k, j), split_begin(heads, k, j + 1)};
  const int64_t r = query_heads / heads;
  const int64_t a = split_begin(query_heads, k, j);
  const int64_t b = split_begin(query_heads, k, j + 1);
  if (a == b) return {};
  return {a / r, (b - 1) / r + 1};
}

int64_t max_holders(int64_t k, int64_t heads, int64_t query_heads) {
  std::vector<int64_t> holders(static_cast<size_t>(heads), 0);
  for (int64_t j = 0; j < k; ++j) {
    const HeadRange hr = head_range(k, j, heads, query_heads);
    for (int64_t h = hr.begin; h < hr.end; ++h) ++holders[static_cast<size_t>(h)];
  }
  return holders.empty() ? 0 : *std::max_element(holders.begin(), holders.end());
}

Shard seq_shard(const RankPlace& p, int64_t elem, int64_t head_dim, int64_t heads) {
  Shard s;
  s.layout = p.layout;
  s.elem = elem;
  s.head_dim = head_dim;
  s.first_sequence = p.first_sequence;
  s.num_sequences = p.num_sequences;
  s.token_begin = split_begin(p.seq_len, p.group_size, p.position);
  s.tokens = split_count(p.seq_len, p.group_size, p.position);
  s.head_begin = 0;
  s.heads = heads;
  return s;
}

Shard head_shard(const RankPlace& p, int64_t elem, int64_t head_dim, int64_t heads, int64_t query_heads) {
  Shard s = seq_shard(p, elem, head_dim, heads);
  const HeadRange hr = head_range(p.group_size, p.position, heads, query_heads);
  s.token_begin = 0;
  s.tokens = p.seq_len;
  s.head_begin = hr.begin;
  s.heads = hr.end - hr.begin;
  return s;
}

std::vector<int64_t> scatter_bytes_to(const RankPlace& p, int64_t elem, int64_t head_dim,
                                      const std::vector<Tensor>& tensors) {
  std::vector<int64_t> out(static_cast<size_t>(p.group_size), 0);
  const int64_t rows = p.num_sequences * split_count(p.seq_len, p.group_size, p.position);
  for (const Tensor& t : tensors) {
    for (int64_t j = 0; j < p.group_size; ++j) {
      const HeadRange hr = head_range(p.group_size, j, t.heads, t.query_heads);
      out[static_cast<size_t>(j)] += rows * (hr.end - hr.begin) * tensor_head_dim(t, head_dim) * elem;
    }
  }
  return out;
}

std::vector<int64_t> scatter_bytes_from(const RankPlace& p, int64_t elem, int64_t head_dim,
                                        const std::vector<Tensor>& tensors) {
  std::vector<int64_t> out(static_cast<size_t>(p.group_size), 0);
  for (const Tensor& t : tensors) {
    const HeadRange hr = head_range(p.group_size, p.position, t.heads, t.query_heads);
    for (int64_t j = 0; j < p.group_size; ++j) {
      const int64_t rows = p.num_sequences * split_count(p.seq_len, p.group_size, j);
      out[static_cast<size_t>(j)] += rows * (hr.end - hr.begin) * tensor_head_dim(t, head_dim) * elem;
    }
  }
  return out;
}

void fill_expected(const Shard& shard, uint64_t seed, int64_t tensor_id, void* data) {
  auto* out = static_cast<unsigned char*>(data);
  const size_t elem = static_cast<size_t>(shard.elem);
  for_each_element(shard, seed, tensor_id, [&](int64_t i, uint64_t key, int64_t d, int64_t) {
    const uint64_t bits = element_bits(key, d);
    std::memcpy(out + static_cast<size_t>(i) * elem, &bits, elem);
  });
}

int64_t count_wrong(const Shard& shard, uint64_t seed, int64_t tensor_id, const void* data) {
  const auto* in = static_cast<const unsigned char*>(data);
  const size_t elem = static_cast<size_t>(shard.elem);
  int64_t wrong = 0;
  for_each_element(shard, seed, tensor_id, [&](int64_t i, uint64_t key, int64_t d, int64_t) {
    const uint64_t bits = element_bits(key, d);
    if (std::memcmp(in + static_cast<size_t>(i) * elem, &bits, elem) != 0) ++wrong;
  });
  return wrong;
}

bool summable(basp_dtype_t dtype) {
  return dtype == BASP_DTYPE_FP16 || dtype == BASP_DTYPE_BF16 || dtype == BASP_DTYPE_FP32 || dtype == BASP_DTYPE_FP64;
}

void encode_small_int(basp_dtype_t dtype, int64_t v, void* out) {
  switch (dtype) {
    case BASP_DTYPE_FP64: {
      const auto x = static_cast<double>(v);
      std::memcpy(out, &x, 8);
      return;
    }
    case BASP_DTYPE_FP32: {
      const auto x = static_cast<float>(v);
      std::memcpy(out, &x, 4);
      return;
    }
    case BASP_DTYPE_BF16: {  // the upper half of the FP32 bits: exact for integers of at most 8 significant bits
      const auto x = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      const auto h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out, &h, 2);
      return;
    }
    case BASP_DTYPE_FP16: {  // sign, 5-bit exponent (bias 15), 10-bit mantissa: exact for |v| <= 2048
      uint16_t h = 0;
      if (v != 0) {
        const uint64_t a = static_cast<uint64_t>(v < 0 ? -v : v);
        int e = 0;
        while ((a >> (e + 1)) != 0) ++e;
        const auto mantissa = static_cast<uint16_t>(((a << 10) >> e) & 0x3ffu);
        h = static_cast<uint16_t>((v < 0 ? 0x8000u : 0u) | static_cast<uint16_t>((e + 15) << 10) | mantissa);
      }
      std::memcpy(out, &h, 2);
      return;
    }
    default: break;
  }
  throw std::invalid_argument(std::string("a summing gather's check needs fp16, bf16, fp32 or fp64, not dtype ") +
                              std::to_string(static_cast<int>(dtype)));
}

TensorCheck tensor_check(const RankPlace& place, Direction direction, basp_dtype_t dtype, int64_t head_dim,
                         const Tensor& tensor) {
  const auto elem = static_cast<int64_t>(basp_dtype_size(dtype));
  const int64_t dim = tensor_head_dim(tensor, head_dim);
  const Shard seq = seq_shard(place, elem, dim, tensor.heads);
  const Shard head = head_shard(place, elem, dim, tensor.heads, tensor.query_heads);
  TensorCheck c;
  c.input = direction == Direction::kScatter ? seq : head;
  c.output = direction == Direction::kScatter ? head : seq;
  c.dtype = dtype;
  c.group_size = place.group_size;
  c.position = place.position;
  c.heads = tensor.heads;
  c.query_heads = tensor.query_heads;
  const int64_t holders = max_holders(place.group_size, tensor.heads, tensor.query_heads);
  c.summed = direction == Direction::kGather && holders > 1;
  // |sum| <= holders * amplitude <= 128 while holders <= 128; beyond, amplitude 1 and |sum| <= holders.
  c.amplitude = std::max<int64_t>(1, 128 / std::max<int64_t>(holders, 1));
  if (c.summed && holders > 256) {
    throw std::invalid_argument("a summing gather's check supports at most 256 holders of a head, not " +
                                std::to_string(holders));
  }
  return c;
}

void fill_input(const TensorCheck& c, uint64_t seed, int64_t tensor_id, void* data) {
  if (!c.summed) return fill_expected(c.input, seed, tensor_id, data);
  auto* out = static_cast<unsigned char*>(data);
  const auto elem = static_cast<size_t>(c.input.elem);
  for_each_element(c.input, seed, tensor_id, [&](int64_t i, uint64_t key, int64_t d, int64_t) {
    encode_small_int(c.dtype, contribution(key, d, c.position, c.amplitude), out + static_cast<size_t>(i) * elem);
  });
}

int64_t count_wrong_output(const TensorCheck& c, uint64_t seed, int64_t tensor_id, const void* data) {
  if (!c.summed) return count_wrong(c.output, seed, tensor_id, data);
  // The holders of every head, from the plain split formulas.
  std::vector<std::vector<int64_t>> holders(static_cast<size_t>(c.heads));
  for (int64_t j = 0; j < c.group_size; ++j) {
    const HeadRange hr = head_range(c.group_size, j, c.heads, c.query_heads);
    for (int64_t h = hr.begin; h < hr.end; ++h) holders[static_cast<size_t>(h)].push_back(j);
  }
  const auto* in = static_cast<const unsigned char*>(data);
  const auto elem = static_cast<size_t>(c.output.elem);
  unsigned char expect[8];
  int64_t wrong = 0;
  for_each_element(c.output, seed, tensor_id, [&](int64_t i, uint64_t key, int64_t d, int64_t h) {
    int64_t sum = 0;
    for (int64_t p : holders[static_cast<size_t>(h)]) sum += contribution(key, d, p, c.amplitude);
    encode_small_int(c.dtype, sum, expect);
    if (std::memcmp(in + static_cast<size_t>(i) * elem, expect, elem) != 0) ++wrong;
  });
  return wrong;
}

}  // namespace basp::bench
