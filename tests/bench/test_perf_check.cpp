// The check data: a fill verifies against itself, any damaged element is counted once, the shard helpers describe
// the two forms of a tensor as tensor_split and the KV-follows-query rule do, and the summing gather's expected
// values are the exact sums of every holder's contribution (checked here against a reference gather written out
// in the test).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "perf_check.h"
#include "perf_shape.h"

using namespace basp::bench;

namespace {

RankPlace place(int64_t k, int64_t l, int64_t seq_len, int64_t first_seq, int64_t num_seq,
                basp_layout_t layout = BASP_LAYOUT_BSHD) {
  RankPlace p;
  p.layout = layout;
  p.group_size = k;
  p.position = l;
  p.seq_len = seq_len;
  p.first_sequence = first_seq;
  p.num_sequences = num_seq;
  return p;
}

// The value of one element as a number (the test's own decoding, not the checker's encoder's inverse).
double decode(basp_dtype_t dtype, const unsigned char* p) {
  if (dtype == BASP_DTYPE_FP64) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  if (dtype == BASP_DTYPE_FP32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == BASP_DTYPE_BF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = (h >> 10) & 0x1f;
  const double m = h & 0x3ff;
  const double v = e == 0 ? m / 1024.0 / 16384.0 : (1.0 + m / 1024.0) * static_cast<double>(int64_t{1} << e) / 32768.0;
  return (h & 0x8000) ? -v : v;
}

}  // namespace

TEST_CASE("shards: sequence-sharded holds a token range, head-sharded a head range", "[bench][check]") {
  const RankPlace p = place(4, 1, 16, 2, 3);
  const Shard seq = seq_shard(p, 2, 8, 12);
  CHECK(seq.token_begin == 4);
  CHECK(seq.tokens == 4);
  CHECK(seq.head_begin == 0);
  CHECK(seq.heads == 12);
  RankPlace sbhd = p;
  sbhd.layout = BASP_LAYOUT_SBHD;
  const Shard head = head_shard(sbhd, 2, 8, 12, 0);
  CHECK(head.token_begin == 0);
  CHECK(head.tokens == 16);
  CHECK(head.head_begin == 3);
  CHECK(head.heads == 3);
  CHECK(seq.bytes() == head.bytes());
  CHECK(seq.index(1, 2, 3, 4) == ((1 * 4 + 2) * 12 + 3) * 8 + 4);
  CHECK(head.index(1, 2, 0, 4) == ((2 * 3 + 1) * 3 + 0) * 8 + 4);
}

TEST_CASE("shards split uneven tokens and heads as tensor_split", "[bench][check]") {
  // S = 10 over K = 4: 3, 3, 2, 2 tokens; H = 6: 2, 2, 1, 1 heads.
  const int64_t tokens[] = {3, 3, 2, 2}, token_begin[] = {0, 3, 6, 8};
  const int64_t heads[] = {2, 2, 1, 1}, head_begin[] = {0, 2, 4, 5};
  for (int64_t l = 0; l < 4; ++l) {
    const RankPlace p = place(4, l, 10, 0, 2);
    const Shard seq = seq_shard(p, 4, 3, 6);
    const Shard head = head_shard(p, 4, 3, 6, 0);
    CHECK(seq.tokens == tokens[l]);
    CHECK(seq.token_begin == token_begin[l]);
    CHECK(head.heads == heads[l]);
    CHECK(head.head_begin == head_begin[l]);
    CHECK(head.tokens == 10);
  }
  // Fewer tokens and heads than positions: the last positions hold none.
  const RankPlace last = place(8, 7, 5, 0, 1);
  CHECK(seq_shard(last, 2, 4, 3).elements() == 0);
  CHECK(head_shard(last, 2, 4, 3, 0).elements() == 0);
}

TEST_CASE("KV heads follow the query split: GQA replicates, MQA goes everywhere", "[bench][check]") {
  // Qwen2.5-7B at K = 8: 28 query heads (4, 4, 4, 4, 3, 3, 3, 3), 4 KV heads of 7 query heads each; positions
  // 1, 3 and 5 hold two KV heads, KV heads 1, 2 and 3 have three holders.
  const int64_t begin[] = {0, 0, 1, 1, 2, 2, 3, 3}, end[] = {1, 2, 2, 3, 3, 4, 4, 4};
  for (int64_t j = 0; j < 8; ++j) {
    const HeadRange hr = head_range(8, j, 4, 28);
    CHECK(hr.begin == begin[j]);
    CHECK(hr.end == end[j]);
  }
  CHECK(max_holders(8, 4, 28) == 3);
  // Llama-3.1-8B at K = 8: one KV head each, none replicated; at K = 16 each KV head has two holders.
  CHECK(max_holders(8, 8, 32) == 1);
  CHECK(max_holders(16, 8, 32) == 2);
  // MQA: every position holds the one KV head.
  CHECK(max_holders(8, 1, 32) == 8);
  for (int64_t j = 0; j < 8; ++j) CHECK(head_range(8, j, 1, 32).end == 1);
  // Fewer query heads than positions: positions without query heads hold no KV head.
  CHECK(head_range(8, 6, 1, 4).end - head_range(8, 6, 1, 4).begin == 0);
  CHECK(max_holders(8, 1, 4) == 4);
  // A KV tensor with as many heads as query heads is query-like.
  CHECK(head_range(3, 1, 5, 5).begin == head_range(3, 1, 5, 0).begin);
  CHECK(head_range(3, 1, 5, 5).end == head_range(3, 1, 5, 0).end);
}

TEST_CASE("scatter byte counts: what one rank sends another is what that one receives", "[bench][check]") {
  const std::vector<Tensor> qkv{{"Q", 28, 0}, {"K", 4, 28}, {"V", 4, 28}};
  for (int64_t k : {1, 3, 8}) {
    std::vector<std::vector<int64_t>> to, from;
    for (int64_t l = 0; l < k; ++l) {
      to.push_back(scatter_bytes_to(place(k, l, 21, 0, 2), 2, 16, qkv));
      from.push_back(scatter_bytes_from(place(k, l, 21, 0, 2), 2, 16, qkv));
    }
    int64_t total = 0;
    for (int64_t a = 0; a < k; ++a) {
      for (int64_t b = 0; b < k; ++b) {
        CHECK(to[a][b] == from[b][a]);
        total += to[a][b];
      }
    }
    // In all: every token of every held head, counted once per holder.
    int64_t held = 0;
    for (const Tensor& t : qkv) {
      for (int64_t j = 0; j < k; ++j)
        held += head_range(k, j, t.heads, t.query_heads).end - head_range(k, j, t.heads, t.query_heads).begin;
    }
    CHECK(total == 2 * 21 * held * 16 * 2);
  }
}

TEST_CASE("count_wrong finds every damaged element and only those", "[bench][check]") {
  for (int64_t elem : {1, 2, 4, 8}) {
    const Shard s = seq_shard(place(2, 0, 8, 0, 2), elem, 5, 6);
    std::vector<unsigned char> data(static_cast<size_t>(s.bytes()), kCheckPoison);
    CHECK(count_wrong(s, 1, 0, data.data()) > s.elements() * 9 / 10);  // poison is not the data
    fill_expected(s, 1, 0, data.data());
    CHECK(count_wrong(s, 1, 0, data.data()) == 0);
    CHECK(count_wrong(s, 2, 0, data.data()) > 0);  // another seed
    CHECK(count_wrong(s, 1, 3, data.data()) > 0);  // another tensor
    data[0] ^= 1;
    data[data.size() - 1] ^= 0x80;
    CHECK(count_wrong(s, 1, 0, data.data()) == 2);
  }
}

TEST_CASE("with K = 1 the two forms hold the same data in the same order", "[bench][check]") {
  for (basp_layout_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD, BASP_LAYOUT_THD}) {
    const RankPlace p = place(1, 0, 6, 0, layout == BASP_LAYOUT_THD ? 1 : 2, layout);
    const Shard seq = seq_shard(p, 2, 4, 3);
    const Shard head = head_shard(p, 2, 4, 3, 0);
    std::vector<unsigned char> a(static_cast<size_t>(seq.bytes())), b(a.size());
    fill_expected(seq, 9, 0, a.data());
    fill_expected(head, 9, 0, b.data());
    CHECK(a == b);
  }
}

TEST_CASE("encode_small_int writes exact integers in every summable type", "[bench][check]") {
  unsigned char buf[8];
  for (basp_dtype_t dtype : {BASP_DTYPE_FP16, BASP_DTYPE_BF16, BASP_DTYPE_FP32, BASP_DTYPE_FP64}) {
    for (int64_t v = -256; v <= 256; ++v) {
      encode_small_int(dtype, v, buf);
      INFO("dtype " << dtype << " v " << v);
      CHECK(decode(dtype, buf) == static_cast<double>(v));
    }
  }
  encode_small_int(BASP_DTYPE_FP16, 5, buf);
  uint16_t h;
  std::memcpy(&h, buf, 2);
  CHECK(h == 0x4500);
  encode_small_int(BASP_DTYPE_BF16, -3, buf);
  std::memcpy(&h, buf, 2);
  CHECK(h == 0xC040);
  encode_small_int(BASP_DTYPE_BF16, 0, buf);
  std::memcpy(&h, buf, 2);
  CHECK(h == 0);  // +0: a sum of integers that is zero is +0
  CHECK_THROWS(encode_small_int(BASP_DTYPE_INT32, 1, buf));
  CHECK(summable(BASP_DTYPE_BF16));
  CHECK(!summable(BASP_DTYPE_BYTE));
  CHECK(!summable(BASP_DTYPE_FP8_E4M3));
}

// A gather written out here: position p's sequence-sharded output from every position's head-sharded input, each
// head taken from its holder (query-like) or summed over its holders in ascending position.
std::vector<unsigned char> reference_gather(const std::vector<TensorCheck>& checks,
                                            const std::vector<std::vector<unsigned char>>& inputs, int64_t p) {
  const TensorCheck& me = checks[static_cast<size_t>(p)];
  const Shard& out = me.output;
  std::vector<unsigned char> result(static_cast<size_t>(out.bytes()));
  const auto elem = static_cast<size_t>(out.elem);
  for (int64_t b = 0; b < out.num_sequences; ++b) {
    for (int64_t s = 0; s < out.tokens; ++s) {
      for (int64_t h = 0; h < out.heads; ++h) {
        for (int64_t d = 0; d < out.head_dim; ++d) {
          double sum = 0;
          const unsigned char* first = nullptr;
          for (size_t j = 0; j < checks.size(); ++j) {
            const Shard& in = checks[j].input;
            if (h < in.head_begin || h >= in.head_begin + in.heads) continue;
            const unsigned char* src = inputs[j].data() + in.index(b, out.token_begin + s, h - in.head_begin, d) * elem;
            if (!first) first = src;
            sum += decode(me.dtype, src);
          }
          unsigned char* dst = result.data() + out.index(b, s, h, d) * elem;
          if (me.summed) {
            encode_small_int(me.dtype, static_cast<int64_t>(sum), dst);
          } else if (first) {
            std::memcpy(dst, first, elem);
          }
        }
      }
    }
  }
  return result;
}

TEST_CASE("the gather's expected values: the input restored, or the exact sum over the holders", "[bench][check]") {
  struct Shape {
    int64_t k, seq_len, heads, query_heads;
    bool summed;
  };
  const Shape shapes[] = {
      {8, 13, 4, 28, true},  // Qwen2.5-7B's KV heads, uneven tokens
      {8, 8, 1, 32, true},   // MQA: eight holders
      {3, 7, 5, 0, false},   // query-like, uneven heads and tokens
      {4, 9, 8, 32, false},  // GQA without replication
      {8, 5, 1, 4, true},    // fewer query heads than positions
  };
  for (const Shape& sh : shapes) {
    for (basp_dtype_t dtype : {BASP_DTYPE_BF16, BASP_DTYPE_FP16, BASP_DTYPE_FP32, BASP_DTYPE_FP64}) {
      for (basp_layout_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
        INFO("K " << sh.k << " S " << sh.seq_len << " H " << sh.heads << " Hq " << sh.query_heads << " dtype " << dtype
                  << " layout " << layout);
        const Tensor t{"dK", sh.heads, sh.query_heads};
        std::vector<TensorCheck> checks;
        std::vector<std::vector<unsigned char>> inputs;
        for (int64_t p = 0; p < sh.k; ++p) {
          checks.push_back(tensor_check(place(sh.k, p, sh.seq_len, 1, 2, layout), Direction::kGather, dtype, 3, t));
          inputs.emplace_back(static_cast<size_t>(checks.back().input.bytes()));
          fill_input(checks.back(), 5, 1, inputs.back().data());
        }
        CHECK(checks[0].summed == sh.summed);
        for (int64_t p = 0; p < sh.k; ++p) {
          std::vector<unsigned char> out = reference_gather(checks, inputs, p);
          CHECK(count_wrong_output(checks[static_cast<size_t>(p)], 5, 1, out.data()) == 0);
          if (!out.empty()) {
            out[out.size() / 2] ^= 0x01;
            CHECK(count_wrong_output(checks[static_cast<size_t>(p)], 5, 1, out.data()) == 1);
          }
        }
        // The sums are not trivially zero: the check would miss a missing holder otherwise.
        if (sh.summed) {
          std::vector<unsigned char> zero(static_cast<size_t>(checks[0].output.bytes()), 0);
          CHECK(count_wrong_output(checks[0], 5, 1, zero.data()) > checks[0].output.elements() / 2);
        }
      }
    }
  }
}

TEST_CASE("a scatter's check: the head-sharded output holds the coordinates' hash", "[bench][check]") {
  const Tensor t{"K", 1, 32};
  const TensorCheck c = tensor_check(place(8, 3, 12, 0, 1), Direction::kScatter, BASP_DTYPE_BF16, 4, t);
  CHECK(!c.summed);
  CHECK(c.input.tokens == split_count(12, 8, 3));
  CHECK(c.output.tokens == 12);
  CHECK(c.output.heads == 1);
  std::vector<unsigned char> out(static_cast<size_t>(c.output.bytes()));
  fill_expected(c.output, 7, 2, out.data());
  CHECK(count_wrong_output(c, 7, 2, out.data()) == 0);
}
