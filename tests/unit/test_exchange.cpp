#include <catch2/catch.hpp>

#include <vector>

#include "common/error.h"
#include "plan/dtype.h"
#include "plan/exchange.h"

namespace {
basp_plan_desc_v1 qkv_desc() {
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_SBHD;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = 64;
  d.head_dim = 8;
  d.num_tensors = 3;
  d.num_heads[0] = 8;
  d.num_heads[1] = 4;
  d.num_heads[2] = 4;
  return d;
}

// tensor_split written out independently of common/split.h: the sizes, then their prefix sums.
std::vector<int64_t> split_bounds(int64_t items, int64_t parts) {
  std::vector<int64_t> b{0};
  for (int64_t j = 0; j < parts; ++j) b.push_back(b.back() + items / parts + (j < items % parts ? 1 : 0));
  return b;
}

// The KV heads [first, last] of the position holding query heads [a, b), as the issue states the routing.
struct Range {
  int64_t begin, end;
};
Range kv_range(int64_t a, int64_t b, int64_t r) {
  if (a == b) return {0, 0};
  return {a / r, (b - 1) / r + 1};
}
}  // namespace

TEST_CASE("exchange plan sizes", "[plan]") {
  const auto spec = basp::plan::validate_spec(qkv_desc());
  const auto p = basp::plan::make_exchange_plan(spec, 4, 2, 3);
  REQUIRE(p.num_tensors() == 3);
  CHECK(p.tensors[0].head_row_bytes(2) == 2 * 8 * 2);
  CHECK(p.tensors[1].seq_rows(2) == 3 * 16);
  // Three peers' chunks per tensor.
  const int64_t q_chunk = 3 * 16 * 2 * 8 * 2;
  const int64_t kv_chunk = 3 * 16 * 1 * 8 * 2;
  CHECK(p.bytes_sent == 3 * (q_chunk + 2 * kv_chunk));
  CHECK(p.workspace_bytes(2) == 3 * (q_chunk + 2 * kv_chunk));  // every chunk a multiple of 64 bytes here
  // The own slot is skipped: peers 0, 1, 3 occupy slots 0, 1, 2.
  CHECK(p.workspace_offset(2, 0, 0, 64) == 0);
  CHECK(p.workspace_offset(2, 0, 3, 64) == 2 * q_chunk);
  CHECK(p.workspace_offset(2, 1, 0, 64) == 3 * q_chunk);
  CHECK_FALSE(p.replicated);
  // K = 1: nothing is exchanged.
  const auto solo = basp::plan::make_exchange_plan(spec, 1, 0, 2);
  CHECK(solo.bytes_sent == 0);
}

TEST_CASE("uneven tokens and heads follow tensor_split", "[plan]") {
  auto d = qkv_desc();
  d.layout = BASP_LAYOUT_BSHD;
  d.seq_len = 11;  // prime, not a multiple of K
  d.num_tensors = 1;
  d.num_heads[0] = 5;
  d.num_heads[1] = d.num_heads[2] = 0;
  const auto spec = basp::plan::validate_spec(d);
  for (int32_t k : {1, 2, 3, 4, 7, 8, 16}) {
    const auto tokens = split_bounds(11, k);
    const auto heads = split_bounds(5, k);
    for (int32_t l = 0; l < k; ++l) {
      const auto p = basp::plan::make_exchange_plan(spec, k, l, 2);
      const auto& g = p.tensors[0];
      CHECK(g.tok_begin(l) == tokens[l]);
      CHECK(g.tok_count(l) == tokens[l + 1] - tokens[l]);
      CHECK(g.head_begin(l) == heads[l]);
      CHECK(g.head_end(l) == heads[l + 1]);
      // What this rank sends: its tokens of every sequence, every head it does not keep.
      const int64_t mine = 2 * (tokens[l + 1] - tokens[l]);
      CHECK(p.bytes_sent == mine * (5 - (heads[l + 1] - heads[l])) * 8 * 2);
    }
  }
}

TEST_CASE("GQA routing: KV heads follow the query split, 28/4 heads at K = 8", "[plan]") {
  auto d = qkv_desc();
  d.num_heads[0] = 28;
  d.num_heads[1] = d.num_heads[2] = 4;
  d.query_heads[1] = d.query_heads[2] = 28;
  const auto spec = basp::plan::validate_spec(d);
  const auto p = basp::plan::make_exchange_plan(spec, 8, 1, 1);
  const auto& kv = p.tensors[1];
  // Query heads 28 over 8: 4, 4, 4, 4, 3, 3, 3, 3. KV heads (r = 7) as the issue lists them.
  const std::vector<Range> expected = {{0, 1}, {0, 2}, {1, 2}, {1, 3}, {2, 3}, {2, 4}, {3, 4}, {3, 4}};
  for (int32_t j = 0; j < 8; ++j) {
    INFO("position " << j);
    CHECK(kv.head_begin(j) == expected[j].begin);
    CHECK(kv.head_end(j) == expected[j].end);
  }
  CHECK(kv.heads_of(1) == 2);
  CHECK(kv.heads_of(3) == 2);
  CHECK(kv.heads_of(5) == 2);
  // KV head 0 is held by positions 0 and 1, head 3 by 5, 6, 7.
  CHECK(kv.first_holder(0) == 0);
  CHECK(kv.last_holder(0) == 1);
  CHECK(kv.first_holder(3) == 5);
  CHECK(kv.last_holder(3) == 7);
  CHECK(p.replicated);
  CHECK(kv.replicated());
  CHECK_FALSE(p.tensors[0].replicated());
}

TEST_CASE("bytes_sent is the routing minimum, and ALST's where ALST applies", "[plan]") {
  struct Case {
    int64_t hq, hkv;
    int32_t k;
  };
  for (const Case c : {Case{28, 4, 8}, Case{16, 2, 8}, Case{16, 2, 4}, Case{32, 8, 16}, Case{12, 2, 8}, Case{24, 8, 16},
                       Case{8, 1, 8}, Case{16, 16, 8}, Case{6, 3, 4}}) {
    auto d = qkv_desc();
    d.seq_len = 40;
    d.num_heads[0] = c.hq;
    d.num_heads[1] = d.num_heads[2] = c.hkv;
    d.query_heads[1] = d.query_heads[2] = c.hq;
    const auto spec = basp::plan::validate_spec(d);
    const int64_t r = c.hq / c.hkv;
    const auto q = split_bounds(c.hq, c.k);
    const auto tokens = split_bounds(40, c.k);
    for (int32_t l = 0; l < c.k; ++l) {
      INFO("Hq " << c.hq << " Hkv " << c.hkv << " K " << c.k << " position " << l);
      const auto p = basp::plan::make_exchange_plan(spec, c.k, l, 2);
      const int64_t rows = 2 * (tokens[l + 1] - tokens[l]);
      int64_t kv_heads_sent = 0;  // each KV head once to each other position that holds it
      for (int32_t j = 0; j < c.k; ++j) {
        if (j == l) continue;
        const Range kr = kv_range(q[j], q[j + 1], r);
        kv_heads_sent += kr.end - kr.begin;
      }
      const int64_t q_heads_sent = c.hq - (q[l + 1] - q[l]);
      const int64_t expected = rows * (q_heads_sent + 2 * kv_heads_sent) * 8 * 2;
      CHECK(p.bytes_sent == expected);
      // ALST (Ulysses with KV replication): where K divides Hq, KV heads are repeated until K divides their count
      // and the exchange is uniform. Its bytes on the wire are never fewer than this routing's.
      if (c.hq % c.k == 0) {
        const int64_t expanded = c.hkv % c.k == 0 ? c.hkv : c.k;
        const int64_t alst = rows * ((c.hq / c.k) * (c.k - 1) + 2 * (expanded / c.k) * (c.k - 1)) * 8 * 2;
        CHECK(p.bytes_sent <= alst);
        if (c.hkv <= c.k) CHECK(p.bytes_sent == alst);
      }
    }
  }
}

TEST_CASE("THD plans hold one stream, sized at capacity", "[plan]") {
  auto d = qkv_desc();
  d.layout = BASP_LAYOUT_THD;
  d.seq_len = -1;
  d.token_capacity = 1000;
  const auto spec = basp::plan::validate_spec(d);
  const auto p = basp::plan::make_exchange_plan(spec, 3, 0, 5);
  CHECK(p.local_sequences == 1);
  CHECK(p.tensors[0].seq_rows(0) == 334);
  const auto g = p.at(0, 7);  // a call of 7 tokens: 3, 2, 2
  CHECK(g.tok_count(0) == 3);
  CHECK(g.tok_begin(2) == 5);
  CHECK(g.ndim() == 3);
  int64_t dims[4];
  g.head_sharded_shape(dims);
  CHECK(dims[0] == 7);
  CHECK(dims[1] == 3);  // 8 query heads over 3: 3, 3, 2
  CHECK(dims[2] == 8);
  // The workspace of a call of fewer tokens fits inside the one sized at capacity.
  CHECK(p.workspace_offset(0, 2, 2, 7) < p.workspace_offset(0, 2, 2, 1000));
  CHECK(p.workspace_offset(0, 2, 2, 1000) < p.workspace_bytes(0));
}

TEST_CASE("descriptor errors name the field and the value", "[plan]") {
  auto bad = qkv_desc();
  bad.num_heads[1] = 3;
  bad.query_heads[1] = 16;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad),
                      Catch::Contains("num_heads[1] (3) does not divide its query head count (16)"));
  bad = qkv_desc();
  bad.query_heads[2] = -4;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("query_heads[2] (-4)"));
  bad = qkv_desc();
  bad.query_heads[5] = 8;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("query_heads[5] (8) must be 0"));
  bad = qkv_desc();
  bad.seq_len = 0;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("seq_len (0) must be positive"));
  bad = qkv_desc();
  bad.token_capacity = 100;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("token_capacity (100) must be 0"));
  bad = qkv_desc();
  bad.layout = BASP_LAYOUT_THD;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("token_capacity (0) must be positive"));
  bad.token_capacity = 128;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("seq_len (64) must be -1 or token_capacity"));
  bad = qkv_desc();
  bad.head_dim = 0;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dim (0)"));
  bad = qkv_desc();
  bad.layout = 7;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("layout (7)"));
  bad = qkv_desc();
  bad.dtype = -1;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("dtype (-1)"));
  bad = qkv_desc();
  bad.num_tensors = 9;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("num_tensors (9)"));
  bad = qkv_desc();
  bad.num_heads[5] = 4;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("num_heads[5] (4) must be 0"));
  bad = qkv_desc();
  bad.head_dim = int64_t{1} << 40;
  bad.seq_len = int64_t{1} << 40;
  REQUIRE_THROWS_WITH(basp::plan::make_exchange_plan(basp::plan::validate_spec(bad), 4, 0, 1),
                      Catch::Contains("overflows"));
}

// Multi-head latent attention's shape: q and k of one head size, v of another, and the rotary part of the key as one
// head of its own size following the query split; every geometry, offset and byte count takes its tensor's size.
TEST_CASE("per-tensor head sizes: each tensor's own, head_dim for the rest", "[plan]") {
  basp_plan_desc_v1 d = qkv_desc();  // SBHD bf16, S = 64, D = 8, heads 8/4/4
  d.num_tensors = 4;
  d.num_heads[1] = 8;
  d.num_heads[2] = 8;
  d.num_heads[3] = 1;
  d.query_heads[3] = 8;
  d.head_dims[0] = 12;
  d.head_dims[2] = 5;  // rows of 10 bytes per head: not a multiple of 16
  d.head_dims[3] = 3;
  const auto spec = basp::plan::validate_spec(d);
  CHECK(spec.head_dims == std::vector<int64_t>{12, 8, 5, 3});
  const auto p = basp::plan::make_exchange_plan(spec, 4, 1, 1);
  const int64_t dims[] = {12, 8, 5, 3};
  int64_t sent = 0;
  for (int32_t t = 0; t < 4; ++t) {
    const auto& g = p.tensors[static_cast<size_t>(t)];
    CHECK(g.head_dim == dims[t]);
    CHECK(g.dim_bytes() == dims[t] * 2);
    // 16 tokens of this rank; every head the others hold (the rotary head: one copy to each of the 3 others).
    sent += 16 * dims[t] * 2 * (t == 3 ? 3 : 6);
  }
  CHECK(p.bytes_sent == sent);
  CHECK(p.replicated);
  // The packed workspace: tensor 2's chunk for peer 3 follows its chunks for peers 0 and 2 (16 tokens x 2 heads).
  CHECK(p.workspace_offset(1, 2, 3, 64) - p.workspace_offset(1, 2, 0, 64) == 2 * 16 * 2 * 5 * 2);
  // head_dim may stay unset when every tensor sets its own, and a plan of one head size is as before.
  d.head_dim = -1;
  d.head_dims[1] = 8;
  CHECK(basp::plan::validate_spec(d).head_dims == spec.head_dims);
  d.head_dim = 0;
  CHECK(basp::plan::validate_spec(d).head_dims == spec.head_dims);
  CHECK(basp::plan::validate_spec(qkv_desc()).head_dims == std::vector<int64_t>{8, 8, 8});
  // A batch plan's tensors the same way.
  CHECK(basp::plan::validate_batch_tensors(d).head_dims == spec.head_dims);
}

TEST_CASE("per-tensor head size errors name the field and the value", "[plan]") {
  auto bad = qkv_desc();
  bad.head_dims[2] = -3;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dims[2] (-3) must be positive"));
  REQUIRE_THROWS_WITH(basp::plan::validate_batch_tensors(bad), Catch::Contains("head_dims[2] (-3)"));
  bad = qkv_desc();
  bad.head_dims[5] = 4;  // only 3 tensors
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dims[5] (4) must be 0: only 3 tensors"));
  bad = qkv_desc();
  bad.head_dim = -1;  // unset, and tensor 1 has no size of its own: 0 after resolution
  bad.head_dims[0] = 16;
  bad.head_dims[2] = 16;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad),
                      Catch::Contains("head_dim (-1) must be positive: head_dims[1] is 0, which stands for head_dim"));
  bad = qkv_desc();
  bad.head_dim = -1;  // every size 0 with head_dim unset
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dim (-1) must be positive: head_dims[0]"));
  bad.head_dim = 0;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dim (0) must be positive: head_dims[0]"));
  bad = qkv_desc();
  bad.head_dim = -5;
  bad.head_dims[0] = bad.head_dims[1] = bad.head_dims[2] = 4;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad), Catch::Contains("head_dim (-5) must be positive, or -1 or 0"));
  bad = qkv_desc();
  bad.head_dims[1] = int64_t{1} << 40;  // one tensor's rows overflow: named, no plan
  bad.seq_len = int64_t{1} << 40;
  REQUIRE_THROWS_WITH(basp::plan::make_exchange_plan(basp::plan::validate_spec(bad), 4, 0, 1),
                      Catch::Contains("overflows"));
}

TEST_CASE("dtype sizes and names", "[plan]") {
  CHECK(basp::plan::dtype_size(BASP_DTYPE_FP8_E4M3) == 1);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_BF16) == 2);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_FP32) == 4);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_INT64) == 8);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_COUNT) == 0);
  CHECK(std::string(basp::plan::dtype_name(BASP_DTYPE_INT32)) == "BASP_DTYPE_INT32");
}
