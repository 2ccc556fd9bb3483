#include "perf_shape.h"

#include <string>

namespace basp::bench {
namespace {

int64_t mul_or_throw(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > kMaxBytes) {
    throw ArgError(what + " (" + std::to_string(a) + " * " + std::to_string(b) + ") exceeds " +
                   std::to_string(kMaxBytes) + " bytes");
  }
  return out;
}

}  // namespace

int64_t bytes_per_token(const std::vector<Exchange>& exchanges, int64_t head_dim, int64_t elem) {
  int64_t heads = 0;
  for (const Exchange& e : exchanges) {
    for (int64_t h : e.heads) {
      if (__builtin_add_overflow(heads, h, &heads)) throw ArgError("the sum of --heads and --kv-heads overflows");
    }
  }
  const int64_t row = mul_or_throw(heads, head_dim, "heads of one iteration * --head-dim");
  return mul_or_throw(row, elem, "bytes of one token (heads * --head-dim * element size)");
}

std::vector<RowShape> shape_rows(const std::vector<int64_t>& sizes, const std::vector<int64_t>& micro_batches,
                                 int64_t world_size, int64_t token_bytes, int64_t elem) {
  std::vector<RowShape> rows;
  for (int64_t b : micro_batches) {
    // The smallest shape: one token per sequence per rank (S = N, T = B).
    const int64_t min_bytes =
        mul_or_throw(b, token_bytes, "-B (" + std::to_string(b) + ") * bytes of one token: the smallest shape");
    int64_t last_seq = -1;
    for (int64_t size : sizes) {
      const int64_t per_sequence = size / min_bytes;  // tokens per sequence per rank, S / N
      RowShape r;
      r.micro_batch = b;
      if (__builtin_mul_overflow(per_sequence > 0 ? per_sequence : 1, world_size, &r.seq_len)) {
        throw ArgError("size (" + std::to_string(size) + " bytes) gives a sequence length that overflows");
      }
      if (r.seq_len == last_seq) continue;
      last_seq = r.seq_len;
      r.tokens_per_rank = b * (r.seq_len / world_size);
      r.bytes = r.tokens_per_rank * token_bytes;  // <= max(size, min_bytes) <= kMaxBytes
      r.count = r.bytes / elem;
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace basp::bench
