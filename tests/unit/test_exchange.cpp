#include <catch2/catch.hpp>

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
}  // namespace

TEST_CASE("exchange plan sizes", "[plan]") {
  const auto spec = basp::plan::validate_spec(qkv_desc(), 4);
  const auto p = basp::plan::make_exchange_plan(spec, 4, 2, 3);
  REQUIRE(p.num_tensors() == 3);
  CHECK(p.tensors[0].row_bytes() == 2 * 8 * 2);
  CHECK(p.tensors[1].rows() == 3 * 16);
  // Three peers' chunks per tensor.
  const int64_t q_chunk = 3 * 16 * 2 * 8 * 2;
  const int64_t kv_chunk = 3 * 16 * 1 * 8 * 2;
  CHECK(p.bytes_sent == 3 * (q_chunk + 2 * kv_chunk));  // also the size of the packed workspace
  // The own slot is skipped: peers 0, 1, 3 occupy slots 0, 1, 2.
  CHECK(p.workspace_offset(0, 0) == 0);
  CHECK(p.workspace_offset(0, 3) == 2 * q_chunk);
  CHECK(p.workspace_offset(1, 0) == 3 * q_chunk);
  // K = 1: nothing is exchanged.
  const auto solo = basp::plan::make_exchange_plan(basp::plan::validate_spec(qkv_desc(), 1), 1, 0, 2);
  CHECK(solo.bytes_sent == 0);
}

TEST_CASE("descriptor errors name the field and the value", "[plan]") {
  auto bad = qkv_desc();
  bad.num_heads[1] = 6;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4),
                      Catch::Contains("num_heads[1] (6) is not divisible by group size (4)"));
  bad = qkv_desc();
  bad.seq_len = 30;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("seq_len (30)"));
  bad = qkv_desc();
  bad.head_dim = 0;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("head_dim (0)"));
  bad = qkv_desc();
  bad.layout = 7;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("layout (7)"));
  bad = qkv_desc();
  bad.dtype = -1;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("dtype (-1)"));
  bad = qkv_desc();
  bad.num_tensors = 9;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("num_tensors (9)"));
  bad = qkv_desc();
  bad.num_heads[5] = 4;
  REQUIRE_THROWS_WITH(basp::plan::validate_spec(bad, 4), Catch::Contains("num_heads[5] (4) must be 0"));
  bad = qkv_desc();
  bad.head_dim = int64_t{1} << 40;
  bad.seq_len = int64_t{1} << 40;
  REQUIRE_THROWS_WITH(basp::plan::make_exchange_plan(basp::plan::validate_spec(bad, 4), 4, 0, 1),
                      Catch::Contains("overflows"));
}

TEST_CASE("dtype sizes", "[plan]") {
  CHECK(basp::plan::dtype_size(BASP_DTYPE_FP8_E4M3) == 1);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_BF16) == 2);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_FP32) == 4);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_INT64) == 8);
  CHECK(basp::plan::dtype_size(BASP_DTYPE_COUNT) == 0);
}
