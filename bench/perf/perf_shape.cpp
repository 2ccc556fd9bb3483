#include "perf_shape.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace basp::bench {
namespace {

__extension__ typedef __int128 Int128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet

int64_t mul_or_throw(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > kMaxBytes) {
    throw ArgError(what + " (" + std::to_string(a) + " * " + std::to_string(b) + ") exceeds " +
                   std::to_string(kMaxBytes) + " bytes");
  }
  return out;
}

}  // namespace

int64_t split_begin(int64_t items, int64_t parts, int64_t index) {
  return index * (items / parts) + std::min(index, items % parts);
}

int64_t split_count(int64_t items, int64_t parts, int64_t index) {
  return split_begin(items, parts, index + 1) - split_begin(items, parts, index);
}

int64_t bytes_per_token(const std::vector<Exchange>& exchanges, int64_t head_dim, int64_t elem) {
  int64_t elements = 0;
  for (const Exchange& e : exchanges) {
    for (const Tensor& t : e.tensors) {
      const int64_t row = mul_or_throw(t.heads, tensor_head_dim(t, head_dim), t.name + "'s heads * head size");
      if (__builtin_add_overflow(elements, row, &elements) || elements > kMaxBytes) {
        throw ArgError("the heads * head sizes of one iteration's tensors exceed " + std::to_string(kMaxBytes));
      }
    }
  }
  return mul_or_throw(elements, elem, "bytes of one token (heads * head sizes * element size)");
}

std::vector<int64_t> mode_groups(Mode mode, int64_t world_size, int64_t micro_batch) {
  std::vector<int64_t> out;
  if (mode != Mode::kBasp) out.push_back(1);
  if (mode != Mode::kUlysses) out.push_back(std::gcd(world_size, micro_batch));
  return out;
}

int64_t max_rank_tokens(int64_t seq_len, int64_t micro_batch, int64_t groups, int64_t world_size) {
  const int64_t k = world_size / groups;
  return micro_batch / groups * split_count(seq_len, k, 0);
}

std::vector<RowShape> shape_rows(const std::vector<int64_t>& sizes, const std::vector<int64_t>& micro_batches,
                                 int64_t world_size, int64_t token_bytes, int64_t elem, Mode mode) {
  std::vector<RowShape> rows;
  for (int64_t b : micro_batches) {
    // The smallest shape: one token per sequence (S = 1); the rank holding the most has one token of each of its
    // sequences, at most B of them (Ulysses).
    (void)mul_or_throw(b, token_bytes, "-B (" + std::to_string(b) + ") * bytes of one token: the smallest shape");
    const std::vector<int64_t> groups = mode_groups(mode, world_size, b);
    int64_t last_seq = -1;
    for (int64_t size : sizes) {
      // N * size / (B * token bytes) in 128 bits: each factor is below 2^40 (sizes, token bytes) or 2^31.
      const Int128 s = static_cast<Int128>(world_size) * size / (static_cast<Int128>(b) * token_bytes);
      if (s > kMaxBytes) {
        throw ArgError("size (" + std::to_string(size) + " bytes) gives a sequence length that overflows");
      }
      RowShape r;
      r.micro_batch = b;
      r.seq_len = std::max<int64_t>(1, static_cast<int64_t>(s));
      if (r.seq_len == last_seq) continue;
      last_seq = r.seq_len;
      int64_t tokens = 0;
      for (int64_t g : groups) tokens = std::max(tokens, max_rank_tokens(r.seq_len, b, g, world_size));
      r.bytes =
          mul_or_throw(tokens, token_bytes, "size (" + std::to_string(size) + " bytes): the largest rank's bytes");
      r.count = r.bytes / elem;
      rows.push_back(r);
    }
  }
  return rows;
}

std::vector<RowShape> thd_rows(const std::vector<int64_t>& micro_batches, const std::vector<int64_t>& doc_lengths) {
  int64_t total = 0;
  for (int64_t l : doc_lengths) total += l;  // bounded by parse_perf_args (kMaxBatchTokens)
  std::vector<RowShape> rows;
  for (int64_t b : micro_batches) {
    RowShape r;
    r.micro_batch = b;
    r.seq_len = total;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace basp::bench
