// The runtime's batch API on its own types (runtime/batch.h): check_batch names the bad field and its value, builds
// each rank's place once, and fingerprints each group's documents once, as basp_plan_set_documents would.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "basp/basp.h"
#include "common/error.h"
#include "plan/exchange.h"
#include "runtime/batch.h"
#include "runtime/plan.h"

namespace {

using basp::runtime::BatchRequest;
using basp::runtime::check_batch;

basp_plan_desc_v1 desc(int32_t layout) {
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = layout;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = layout == BASP_LAYOUT_THD ? -1 : 8;
  d.head_dim = 2;
  d.num_tensors = 1;
  d.num_heads[0] = 4;
  return d;
}

// Four ranks: group 0 = {2, 0} holds documents 1 and 0 (in that order), group 1 = {1, 3} document 2.
BatchRequest thd_request() {
  BatchRequest r;
  r.tensors = basp::plan::validate_batch_tensors(desc(BASP_LAYOUT_THD));
  r.groups = {{{2, 0}, 0, {1, 0}}, {{1, 3}, 0, {2}}};
  r.lengths = {5, 7, 3};
  return r;
}

// Four ranks in two groups of two, 1 and 2 sequences of 8 tokens.
BatchRequest bshd_request() {
  BatchRequest r;
  r.tensors = basp::plan::validate_batch_tensors(desc(BASP_LAYOUT_BSHD));
  r.groups = {{{0, 1}, 1, {}}, {{2, 3}, 2, {}}};
  return r;
}

}  // namespace

TEST_CASE("check_batch places every rank once and counts each group", "[batch]") {
  const auto b = check_batch(thd_request(), 4, 0);
  CHECK(b.group_of == std::vector<int32_t>{0, 1, 0, 1});
  CHECK(b.position_of == std::vector<int32_t>{1, 0, 0, 1});
  CHECK(b.counts == std::vector<int64_t>{12, 3});
  REQUIRE(b.documents.size() == 2);
  CHECK(b.documents[0].cu_seqlens == std::vector<int64_t>{0, 7, 12});
  const int64_t cu[] = {0, 7, 12};
  CHECK(b.documents[0].fingerprint == basp::runtime::documents_fingerprint(cu, 2));
  CHECK(b.fingerprint != 0);
  const auto s = check_batch(bshd_request(), 4, 0);
  CHECK(s.counts == std::vector<int64_t>{1, 2});
  CHECK(s.documents.empty());
}

TEST_CASE("check_batch's fingerprint follows the documents and the membership", "[batch]") {
  const uint64_t base = check_batch(thd_request(), 4, 0).fingerprint;
  CHECK(check_batch(thd_request(), 4, 0).fingerprint == base);
  BatchRequest longer = thd_request();
  longer.lengths[2] = 4;
  CHECK(check_batch(longer, 4, 0).fingerprint != base);
  BatchRequest swapped = thd_request();
  swapped.groups[0].members = {0, 2};
  CHECK(check_batch(swapped, 4, 0).fingerprint != base);
}

TEST_CASE("check_batch's fingerprint follows each tensor's head size", "[batch]") {
  const uint64_t base = check_batch(bshd_request(), 4, 0).fingerprint;
  basp_plan_desc_v1 d = desc(BASP_LAYOUT_BSHD);
  d.head_dims[0] = 2;  // the same size as head_dim: the same plan
  BatchRequest same = bshd_request();
  same.tensors = basp::plan::validate_batch_tensors(d);
  CHECK(check_batch(same, 4, 0).fingerprint == base);
  d.head_dims[0] = 3;
  BatchRequest wider = bshd_request();
  wider.tensors = basp::plan::validate_batch_tensors(d);
  CHECK(check_batch(wider, 4, 0).fingerprint != base);
}

TEST_CASE("check_batch names a bad membership", "[batch]") {
  BatchRequest r = bshd_request();
  r.groups[1].members = {2, 2};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->ranks lists rank 2 in group 1 and in group 1"));
  r = bshd_request();
  r.groups[1].members = {2, 9};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->ranks[3] (9) is outside 0..3"));
  r = bshd_request();
  r.groups[1].members = {2};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->group_sizes sum to 3, not to the comm's 4 ranks"));
  r = bshd_request();
  r.groups[1].members = {};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->group_sizes[1] (0) must be positive"));
  r = bshd_request();
  r.groups.clear();
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->num_groups (0) must be in 1..4"));
}

TEST_CASE("check_batch names bad sequences and documents", "[batch]") {
  BatchRequest r = bshd_request();
  r.groups[0].sequences = 0;
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->group_docs[0] (0) must be positive"));
  r = bshd_request();
  r.lengths = {3};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("must be NULL for a BSHD or SBHD plan"));
  r = thd_request();
  r.groups[1].docs = {3};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->docs[2] (3) is outside 0..2"));
  r = thd_request();
  r.groups[1].docs = {0};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->docs lists document 0 twice"));
  r = thd_request();
  r.groups[1].docs = {};
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->group_docs sum to 2, not to num_docs (3)"));
  r = thd_request();
  r.lengths[1] = 0;
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("batch->lengths[1] (0) must be positive"));
}

TEST_CASE("check_batch names a stream over a capacity", "[batch]") {
  // Group 0's stream of 12 tokens puts 6 on a rank.
  CHECK_NOTHROW(check_batch(thd_request(), 4, 6));
  CHECK_THROWS_WITH(check_batch(thd_request(), 4, 5),
                    Catch::Contains("puts 6 tokens on a rank, more than the comm's batch_capacity (5)"));
  BatchRequest r = thd_request();
  r.token_capacity = 11;
  CHECK_THROWS_WITH(check_batch(r, 4, 0), Catch::Contains("desc->token_capacity (11) is less than group 0's stream"));
  r.token_capacity = 12;
  CHECK_NOTHROW(check_batch(r, 4, 0));
  // BSHD: group 1 holds 2 sequences of 8 tokens, 4 of each on a rank.
  CHECK_THROWS_WITH(check_batch(bshd_request(), 4, 7), Catch::Contains("puts 8 tokens on a rank"));
}

TEST_CASE("validate_batch_tensors leaves the sequences to the batch", "[batch]") {
  basp_plan_desc_v1 d = desc(BASP_LAYOUT_THD);
  CHECK(basp::plan::validate_batch_tensors(d).seq_len == 0);
  d.token_capacity = -1;
  CHECK_THROWS_WITH(basp::plan::validate_batch_tensors(d), Catch::Contains("token_capacity (-1) must be 0"));
  d.token_capacity = 0;
  d.seq_len = 5;
  CHECK_THROWS_WITH(basp::plan::validate_batch_tensors(d), Catch::Contains("seq_len (5) must be -1 for a THD plan"));
  d.token_capacity = 5;
  CHECK(basp::plan::validate_batch_tensors(d).seq_len == 0);
  CHECK(basp::plan::validate_batch_tensors(desc(BASP_LAYOUT_BSHD)).seq_len == 8);
  d = desc(BASP_LAYOUT_BSHD);
  d.seq_len = 0;
  CHECK_THROWS_WITH(basp::plan::validate_batch_tensors(d), Catch::Contains("seq_len (0) must be positive"));
}
