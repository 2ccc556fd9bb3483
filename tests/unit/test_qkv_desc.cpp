// basp::PlanDesc::qkv (the C++ wrapper, basp.hpp) describes K and V as the key/value tensors of the query heads:
// query_heads[1] = query_heads[2] = Hq. Left at 0, K and V would be split as query-like tensors, and with 32 query
// and 8 KV heads at K = 16 most positions would get KV heads that their query heads do not read, with no error.
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <vector>

#include "basp/basp.hpp"
#include "common/status_name.h"
#include "plan/exchange.h"
#include "split_reference.h"

// basp.hpp's error path names the status through the C ABI, whose definitions are the shared library's (capi/), not
// basp_core's: weak stand-ins for this program, which never reaches that path here.
extern "C" __attribute__((weak)) const char* basp_status_string(basp_status_t status) {
  return basp::detail::status_name(status);
}
extern "C" __attribute__((weak)) const char* basp_last_error(void) { return ""; }

TEST_CASE("PlanDesc::qkv: K and V serve the query heads", "[plan][cpp]") {
  const basp::PlanDesc d = basp::PlanDesc::qkv(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 4096, 128, 32, 8);
  REQUIRE(d.num_tensors == 3);
  CHECK(d.num_heads[0] == 32);
  CHECK(d.num_heads[1] == 8);
  CHECK(d.num_heads[2] == 8);
  CHECK(d.query_heads[0] == 0);  // Q is query-like
  CHECK(d.query_heads[1] == 32);
  CHECK(d.query_heads[2] == 32);
  for (int t = 3; t < BASP_MAX_TENSORS; ++t) CHECK(d.query_heads[t] == 0);
}

TEST_CASE("PlanDesc::qkv, 32/8 heads at K = 16: every position gets the KV heads its query heads read", "[plan][cpp]") {
  constexpr int64_t hq = 32, hkv = 8, group = 16;
  constexpr int64_t r = hq / hkv;  // query heads per KV head: query head q reads KV head q / r
  const auto spec = basp::plan::validate_spec(basp::PlanDesc::qkv(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 64, 8, hq, hkv));
  const std::vector<int64_t> q = basp::test::split_bounds(hq, group);  // tensor_split of the query heads
  const auto reference = basp::test::head_ranges(hkv, hq, group);      // docs/design.md's KV ranges
  int positions_checked = 0;
  for (int32_t l = 0; l < group; ++l) {
    INFO("position " << l);
    const auto p = basp::plan::make_exchange_plan(spec, static_cast<int32_t>(group), l, 1);
    REQUIRE(p.num_tensors() == 3);
    // The query heads this position holds, and the KV heads those read.
    CHECK(p.tensors[0].head_begin(l) == q[l]);
    CHECK(p.tensors[0].head_end(l) == q[l + 1]);
    std::set<int64_t> read;
    for (int64_t h = q[l]; h < q[l + 1]; ++h) read.insert(h / r);
    REQUIRE_FALSE(read.empty());  // 32 over 16: two query heads each
    for (int32_t t : {1, 2}) {
      INFO("tensor " << t);
      const auto& kv = p.tensors[static_cast<size_t>(t)];
      std::set<int64_t> held;
      for (int64_t h = kv.head_begin(l); h < kv.head_end(l); ++h) held.insert(h);
      CHECK(held == read);
      CHECK(kv.head_begin(l) == reference[static_cast<size_t>(l)].begin);
      CHECK(kv.head_end(l) == reference[static_cast<size_t>(l)].end);
    }
    ++positions_checked;
  }
  CHECK(positions_checked == group);
}
