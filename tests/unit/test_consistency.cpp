// The consistency check's pure parts (runtime/consistency.*, runtime/timeout.*): the fingerprint separates every
// field, the mismatch message names the field, the values and the ranks holding them, and the timeout resolves
// from the config, the environment and the default in that order.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/rank_list.h"
#include "plan/groups.h"
#include "runtime/consistency.h"
#include "runtime/timeout.h"

using basp::runtime::CallRecord;

namespace {

basp_plan_desc_v1 qkv() {
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = 4096;
  d.head_dim = 128;
  d.num_tensors = 3;
  d.num_heads[0] = 32;
  d.num_heads[1] = 8;
  d.num_heads[2] = 8;
  return d;
}

basp::plan::GroupLayout one_group(int32_t n) {
  return basp::plan::make_layout(n, 1, basp::plan::contiguous_members(n, 1));
}

CallRecord plan_record(const basp_plan_desc_v1& d, const basp::plan::GroupLayout& layout) {
  return basp::runtime::describe_plan_create(&d, BASP_SUCCESS, layout, BASP_PLACEMENT_CONTIGUOUS);
}

std::vector<int32_t> iota(int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("compress_ranks: runs of three or more become a..b", "[consistency]") {
  using basp::detail::compress_ranks;
  CHECK(compress_ranks({}) == "");
  CHECK(compress_ranks({3}) == "3");
  CHECK(compress_ranks({0, 1}) == "0, 1");
  CHECK(compress_ranks({0, 1, 2}) == "0..2");
  CHECK(compress_ranks({7, 0, 2, 1, 5, 8, 9}) == "0..2, 5, 7..9");
  CHECK(compress_ranks({4, 4, 5}) == "4, 5");
}

TEST_CASE("fingerprint: every field of a plan descriptor changes it", "[consistency]") {
  const auto layout = one_group(4);
  const basp_plan_desc_v1 base = qkv();
  const uint64_t h = basp::runtime::fingerprint(plan_record(base, layout));
  CHECK(h == basp::runtime::fingerprint(plan_record(base, layout)));
  std::vector<basp_plan_desc_v1> variants(14, base);
  variants[0].layout = BASP_LAYOUT_SBHD;
  variants[1].dtype = BASP_DTYPE_FP16;
  variants[2].seq_len = 2048;
  variants[3].head_dim = 64;
  variants[4].num_tensors = 2;
  variants[5].reserved0 = 1;
  for (int t = 0; t < 8; ++t) variants[6 + t].num_heads[t] += 4;
  for (const auto& v : variants) CHECK(basp::runtime::fingerprint(plan_record(v, layout)) != h);
  // The comm's side too: another B, G, placement or membership.
  const auto other = basp::plan::make_layout(4, 2, basp::plan::contiguous_members(4, 2));
  CHECK(basp::runtime::fingerprint(plan_record(base, other)) != h);
  const auto swapped = basp::plan::make_layout(4, 1, {{1, 0, 2, 3}});
  CHECK(basp::runtime::fingerprint(plan_record(base, swapped)) != h);
  CHECK(basp::runtime::fingerprint(
            basp::runtime::describe_plan_create(&base, BASP_SUCCESS, layout, BASP_PLACEMENT_DEFAULT)) != h);
  // A rank whose own checks failed, or whose struct could not be read.
  CHECK(basp::runtime::fingerprint(basp::runtime::describe_plan_create(&base, BASP_ERROR_INVALID_ARGUMENT, layout,
                                                                       BASP_PLACEMENT_CONTIGUOUS)) != h);
  CHECK(basp::runtime::fingerprint(basp::runtime::describe_plan_create(nullptr, BASP_ERROR_NULL_POINTER, layout,
                                                                       BASP_PLACEMENT_CONTIGUOUS)) != h);
}

TEST_CASE("fingerprint: every per-tensor head size changes it, and a mismatch names it", "[consistency]") {
  const auto layout = one_group(4);
  const basp_plan_desc_v1 base = qkv();
  const uint64_t h = basp::runtime::fingerprint(plan_record(base, layout));
  for (int t = 0; t < BASP_MAX_TENSORS; ++t) {
    basp_plan_desc_v1 v = base;
    v.head_dims[t] = 96;
    CHECK(basp::runtime::fingerprint(plan_record(v, layout)) != h);
  }
  basp_plan_desc_t d = base;
  std::vector<CallRecord> records(3, plan_record(d, layout));
  d.head_dims[2] = 96;
  records[1] = plan_record(d, layout);
  CHECK(basp::runtime::describe_mismatch(records, iota(3)) == "head_dims[2]: rank 0, 2 = 0, rank 1 = 96");
}

TEST_CASE("describe_mismatch: field, values and ranks", "[consistency]") {
  const auto layout = one_group(4);
  basp_plan_desc_v1 d = qkv();
  std::vector<CallRecord> records(4, plan_record(d, layout));
  CHECK(basp::runtime::describe_mismatch(records, iota(4)).empty());

  d.num_heads[1] = 4;
  records[3] = plan_record(d, layout);
  CHECK(basp::runtime::describe_mismatch(records, iota(4)) == "num_heads[1]: rank 0..2 = 8, rank 3 = 4");
  // Labels are world ranks: the same records for group 1 of a 2-group world.
  CHECK(basp::runtime::describe_mismatch(records, {4, 5, 6, 7}) == "num_heads[1]: rank 4..6 = 8, rank 7 = 4");

  d.dtype = BASP_DTYPE_FP32;
  records[1] = plan_record(d, layout);
  CHECK(basp::runtime::describe_mismatch(records, iota(4)) ==
        "dtype: rank 0, 2, 3 = BASP_DTYPE_BF16, rank 1 = BASP_DTYPE_FP32; num_heads[1]: rank 0, 2 = 8, rank 1, 3 = 4");

  // A rank whose descriptor could not be read: its fields are not compared, its failed check is named.
  std::vector<CallRecord> unreadable(3, plan_record(qkv(), layout));
  unreadable[2] =
      basp::runtime::describe_plan_create(nullptr, BASP_ERROR_NULL_POINTER, layout, BASP_PLACEMENT_CONTIGUOUS);
  CHECK(basp::runtime::describe_mismatch(unreadable, iota(3)) ==
        "argument checks: rank 0, 1 = passed, rank 2 = failed with BASP_ERROR_NULL_POINTER");

  // Different calls: only the call is named.
  std::vector<CallRecord> calls(4, plan_record(qkv(), layout));
  calls[2] = basp::runtime::describe_call(basp::runtime::CallKind::kMemAlloc, BASP_SUCCESS);
  CHECK(basp::runtime::describe_mismatch(calls, iota(4)) ==
        "call: rank 0, 1, 3 = basp_plan_create, rank 2 = basp_mem_alloc");

  // Comm creation fields, enums by name.
  basp_comm_config_v1 c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 8;
  std::vector<CallRecord> comms(
      5, basp::runtime::describe_comm_create(basp::runtime::CallKind::kCommCreateMpi, &c, BASP_SUCCESS));
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  comms[0] = basp::runtime::describe_comm_create(basp::runtime::CallKind::kCommCreateMpi, &c, BASP_SUCCESS);
  CHECK(basp::runtime::describe_mismatch(comms, iota(5)) ==
        "placement: rank 0 = BASP_PLACEMENT_CONTIGUOUS, rank 1..4 = BASP_PLACEMENT_DEFAULT");

  // basp_mem_free with NULL on some ranks only.
  std::vector<CallRecord> frees = {basp::runtime::describe_mem_free(false), basp::runtime::describe_mem_free(true)};
  CHECK(basp::runtime::describe_mismatch(frees, {0, 1}) == "ptr: rank 0 = a pointer, rank 1 = NULL");
}

namespace {

// A group of records.size() ranks seen from position `me`: each all-gather returns every rank's bytes, built from
// its record (8 bytes: the fingerprint; sizeof(CallRecord): the record), after checking that `me` sent its own.
struct EmulatedGroup {
  std::vector<CallRecord> records;
  int32_t me = 0;
  std::vector<std::string> steps;
  bool sent_own = true;

  basp::runtime::AllGatherBytes allgather() {
    return [this](const void* send, size_t bytes, void* recv, const std::string& step) {
      steps.push_back(step);
      auto* out = static_cast<unsigned char*>(recv);
      for (size_t r = 0; r < records.size(); ++r) {
        if (bytes == sizeof(uint64_t)) {
          const uint64_t fp = basp::runtime::fingerprint(records[r]);
          std::memcpy(out + r * bytes, &fp, bytes);
        } else {
          REQUIRE(bytes == sizeof(CallRecord));
          std::memcpy(out + r * bytes, &records[r], bytes);
        }
      }
      sent_own = sent_own && std::memcmp(send, out + static_cast<size_t>(me) * bytes, bytes) == 0;
    };
  }
};

}  // namespace

TEST_CASE("agree_by_allgather: two rounds when the records agree, a named mismatch otherwise", "[consistency]") {
  const auto layout = one_group(4);
  basp_plan_desc_v1 d = qkv();
  const std::string where = "group 1 (world ranks 4..7)";
  const std::vector<int32_t> labels = {4, 5, 6, 7};

  EmulatedGroup same{std::vector<CallRecord>(4, plan_record(d, layout)), 2};
  REQUIRE_NOTHROW(basp::runtime::agree_by_allgather(same.allgather(), 4, labels, where, same.records[2]));
  REQUIRE(same.steps.size() == 2);  // the fingerprints, then the presence round
  CHECK(same.steps[0] == "the consistency check of basp_plan_create (every rank must call it)");
  CHECK(same.steps[1] == "the second round of the consistency check of basp_plan_create");
  CHECK(same.sent_own);

  // Every rank failed its own checks alike: nobody goes on, so no presence round.
  EmulatedGroup failed{std::vector<CallRecord>(4, plan_record(d, layout)), 1};
  for (auto& r : failed.records) r.local_status = BASP_ERROR_INVALID_ARGUMENT;
  REQUIRE_NOTHROW(basp::runtime::agree_by_allgather(failed.allgather(), 4, labels, where, failed.records[1]));
  CHECK(failed.steps.size() == 1);

  for (int32_t me : {0, 3}) {
    EmulatedGroup differ{std::vector<CallRecord>(4, plan_record(d, layout)), me};
    basp_plan_desc_v1 other = d;
    other.num_heads[1] = 4;
    differ.records[3] = plan_record(other, layout);
    try {
      basp::runtime::agree_by_allgather(differ.allgather(), 4, labels, where, differ.records[static_cast<size_t>(me)]);
      FAIL("no mismatch reported");
    } catch (const basp::detail::Error& e) {
      CHECK(e.status() == BASP_ERROR_MISMATCH);
      CHECK(std::string(e.what()) ==
            "the ranks of group 1 (world ranks 4..7) called basp_plan_create with different arguments: "
            "num_heads[1]: rank 4..6 = 8, rank 7 = 4");
    }
    REQUIRE(differ.steps.size() == 2);  // then the records
    CHECK(differ.steps[1] == "the gather of the ranks' arguments of basp_plan_create");
    CHECK(differ.sent_own);
  }

  // Different calls: named as such.
  EmulatedGroup calls{std::vector<CallRecord>(2, plan_record(d, layout)), 0};
  calls.records[1] = basp::runtime::describe_call(basp::runtime::CallKind::kMemAlloc, BASP_SUCCESS);
  try {
    basp::runtime::agree_by_allgather(calls.allgather(), 2, {0, 1}, "group 0 (world ranks 0, 1)", calls.records[0]);
    FAIL("no mismatch reported");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_MISMATCH);
    CHECK(std::string(e.what()) ==
          "the ranks of group 0 (world ranks 0, 1) are not in the same collective call: "
          "call: rank 0 = basp_plan_create, rank 1 = basp_mem_alloc");
  }

  // A failure of the all-gather itself (a timeout) comes through unchanged.
  auto timing_out = [](const void*, size_t, void*, const std::string& step) {
    basp::detail::fail(BASP_ERROR_TIMEOUT, "timed out in ", step);
  };
  try {
    basp::runtime::agree_by_allgather(timing_out, 4, labels, where, same.records[0]);
    FAIL("no timeout reported");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_TIMEOUT);
  }
}

TEST_CASE("agree_by_allgather: on a mismatch, how the other ranks' own checks went", "[consistency]") {
  using basp::runtime::OthersChecks;
  const auto layout = one_group(3);
  const basp_plan_desc_v1 d = qkv();
  basp_plan_desc_v1 other = d;
  other.num_heads[1] = 4;
  // Each case: the three ranks' own statuses, rank 2's record differing in num_heads[1] too; seen from rank `me`.
  struct Case {
    basp_status_t status[3];
    int32_t me;
    OthersChecks expected;
  };
  const basp_status_t ok = BASP_SUCCESS, bad = BASP_ERROR_INVALID_ARGUMENT, no = BASP_ERROR_UNSUPPORTED;
  const Case cases[] = {
      {{ok, ok, ok}, 0, OthersChecks::kPassed}, {{bad, ok, ok}, 0, OthersChecks::kPassed},
      {{bad, ok, ok}, 1, OthersChecks::kMixed}, {{no, no, no}, 1, OthersChecks::kFailedAlike},
      {{bad, no, no}, 0, OthersChecks::kMixed}, {{bad, no, no}, 1, OthersChecks::kMixed},
      {{no, no, ok}, 0, OthersChecks::kMixed},  {{no, no, ok}, 2, OthersChecks::kMixed},
  };
  for (const Case& c : cases) {
    EmulatedGroup g{{plan_record(d, layout), plan_record(d, layout), plan_record(other, layout)}, c.me};
    for (int r = 0; r < 3; ++r) g.records[static_cast<size_t>(r)].local_status = c.status[r];
    OthersChecks seen = OthersChecks::kPassed;
    INFO("statuses " << c.status[0] << " " << c.status[1] << " " << c.status[2] << ", seen from rank " << c.me);
    CHECK_THROWS_AS(basp::runtime::agree_by_allgather(g.allgather(), 3, {0, 1, 2}, "group 0",
                                                      g.records[static_cast<size_t>(c.me)], &seen),
                    basp::detail::Error);
    CHECK(seen == c.expected);
  }
}

TEST_CASE("describe_mismatch: many distinct values are counted, not listed", "[consistency]") {
  const auto layout = one_group(12);
  std::vector<CallRecord> records;
  for (int r = 0; r < 12; ++r) {
    basp_plan_desc_v1 d = qkv();
    d.seq_len = 1024 * (r + 1);
    records.push_back(plan_record(d, layout));
  }
  const std::string m = basp::runtime::describe_mismatch(records, iota(12));
  CHECK(m.rfind("seq_len: rank 0 = 1024, rank 1 = 2048", 0) == 0);
  CHECK(m.find("rank 7 = 8192 and 4 more values") != std::string::npos);
}

TEST_CASE("describe_group names the group's world ranks", "[consistency]") {
  const auto layout = basp::plan::make_layout(8, 2, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(basp::plan::describe_group(layout, 1) == "group 1 (world ranks 1, 3, 5, 7)");
  CHECK(basp::plan::describe_group(one_group(1), 0) == "group 0 (world rank 0)");
  CHECK(basp::plan::describe_group(one_group(4), 0) == "group 0 (world ranks 0..3)");
}

TEST_CASE("timeout: config, then BASP_TIMEOUT_MS, then the default", "[consistency]") {
  using basp::runtime::resolve_timeout_ms;
  unsetenv("BASP_TIMEOUT_MS");
  CHECK(resolve_timeout_ms(-1) == BASP_DEFAULT_TIMEOUT_MS);
  CHECK(resolve_timeout_ms(0) == 0);
  CHECK(resolve_timeout_ms(1500) == 1500);
  setenv("BASP_TIMEOUT_MS", "2500", 1);
  CHECK(resolve_timeout_ms(-1) == 2500);
  CHECK(resolve_timeout_ms(700) == 700);  // the config wins
  setenv("BASP_TIMEOUT_MS", "0", 1);
  CHECK(resolve_timeout_ms(-1) == 0);
  for (const char* bad : {"5s", "-1", "1e3", " 12", "99999999999999999999"}) {
    INFO(bad);
    setenv("BASP_TIMEOUT_MS", bad, 1);
    try {
      resolve_timeout_ms(-1);
      FAIL("accepted");
    } catch (const basp::detail::Error& e) {
      CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
      CHECK_THAT(e.what(), Catch::Contains(std::string("BASP_TIMEOUT_MS (") + bad + ")"));
    }
  }
  unsetenv("BASP_TIMEOUT_MS");
  for (int64_t bad : {int64_t{-2}, basp::runtime::kMaxTimeoutMs + 1}) {
    try {
      resolve_timeout_ms(bad);
      FAIL("accepted");
    } catch (const basp::detail::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("config->timeout_ms (" + std::to_string(bad) + ")"));
    }
  }
}

TEST_CASE("deadline: 0 never expires, a positive one does", "[consistency]") {
  const basp::detail::Deadline never(0);
  CHECK(never.never());
  CHECK_FALSE(never.expired(basp::detail::Deadline::Clock::now() + std::chrono::hours(24 * 365)));
  const basp::detail::Deadline soon(5);
  CHECK_FALSE(soon.never());
  CHECK(soon.expired(basp::detail::Deadline::Clock::now() + std::chrono::milliseconds(6)));
}
