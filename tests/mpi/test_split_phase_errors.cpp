// Split-phase head chunks through the C ABI (basp_scatter_start, _test, _wait): progress while the caller computes
// without calling the library, every misuse refused with its status and a message naming the value, ranks on
// different chunks a MISMATCH naming both, a plan destroyed with chunks in flight, and (with --thread-single) a
// world without MPI_THREAD_MULTIPLE. The chunks' bytes are checked against the one-call exchange; the whole case
// matrix (paths, shapes) is tests/mpi/test_head_chunks.cpp --split-phase.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"
#include "pattern.h"

namespace {

using basp::test::kPoison;
using basp::test::world_rank;
using basp::test::world_size;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

bool g_thread_single = false;  // --thread-single: MPI initialised with MPI_THREAD_SINGLE

// Rank r's part of an MHA exchange of three tensors of `heads` heads over one group of every rank (BSHD, one
// sequence, `seq_len` tokens, bytes): plan, inputs a function of the global coordinates, head-sharded outputs.
struct Setup {
  basp_comm_t comm = nullptr;
  basp_plan_t plan = nullptr;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  std::vector<Bytes> seq, head;

  Setup(int64_t seq_len, int64_t heads, int64_t head_dim, int64_t timeout_ms = 0,
        std::vector<int64_t> query_heads = {0, 0, 0}, std::vector<int64_t> num_heads = {}) {
    basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
    cfg.micro_batch = 1;
    if (timeout_ms > 0) cfg.timeout_ms = timeout_ms;
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
    basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
    d.layout = BASP_LAYOUT_BSHD;
    d.dtype = BASP_DTYPE_FP32;
    d.seq_len = seq_len;
    d.num_tensors = 3;
    for (int t = 0; t < 3; ++t) {
      d.num_heads[t] = num_heads.empty() ? heads : num_heads[static_cast<size_t>(t)];
      d.query_heads[t] = query_heads[static_cast<size_t>(t)];
      d.head_dims[t] = head_dim;
    }
    REQUIRE(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS);
    REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
    for (int t = 0; t < 3; ++t) {
      const int64_t n = info.seq_sharded_elems[t] * 4;
      Bytes in(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        in[static_cast<size_t>(i)] = basp::test::pattern_byte(17, t, 0, info.token_begin, i, world_rank(), 0);
      }
      seq.push_back(std::move(in));
      head.emplace_back(static_cast<size_t>(info.head_sharded_elems[t] * 4), kPoison);
    }
  }
  ~Setup() {
    if (plan) basp_plan_destroy(plan);
    basp_comm_destroy(comm);
  }
  std::vector<const void*> in() const { return {seq[0].data(), seq[1].data(), seq[2].data()}; }
  std::vector<void*> out() { return {head[0].data(), head[1].data(), head[2].data()}; }
  void poison() {
    for (Bytes& b : head) std::fill(b.begin(), b.end(), kPoison);
  }
  basp_status_t start(int32_t chunk, int32_t count) {
    const auto i = in();
    const auto o = out();
    return basp_scatter_start(plan, chunk, count, -1, i.data(), o.data(), nullptr);
  }
  // The one-call scatter's outputs, the reference.
  std::vector<Bytes> whole() {
    poison();
    const auto i = in();
    const auto o = out();
    REQUIRE(basp_scatter(plan, i.data(), o.data(), nullptr) == BASP_SUCCESS);
    return head;
  }
};

std::string last_error() { return basp_last_error(); }

void require_error(basp_status_t st, basp_status_t expected, const std::string& needle) {
  const std::string message = last_error();
  INFO(message);
  CHECK(st == expected);
  CHECK(message.find(needle) != std::string::npos);
}

double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

TEST_CASE("progress: a started chunk completes while every rank sleeps outside the library", "[split_phase]") {
  if (g_thread_single || world_size() < 2) return;
  Setup s(4096, 8, 64);
  const std::vector<Bytes> whole = s.whole();
  // The exchange's time: the slowest rank's best of three one-call scatters.
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    s.whole();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double exchange = max_over_ranks(best);
  for (const int32_t count : {1, 2}) {
    INFO("C = " << count << ", exchange " << exchange * 1e3 << " ms");
    s.poison();
    MPI_Barrier(MPI_COMM_WORLD);
    for (int32_t c = 0; c < count; ++c) REQUIRE(s.start(c, count) == BASP_SUCCESS);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(20 * exchange, 0.02)));
    for (int32_t c = 0; c < count; ++c) {
      int32_t done = -1;
      REQUIRE(basp_scatter_test(s.plan, c, &done) == BASP_SUCCESS);
      CHECK(done == 1);  // fails when the exchange progresses only inside library calls
    }
    for (int32_t c = 0; c < count; ++c) REQUIRE(basp_scatter_wait(s.plan, c) == BASP_SUCCESS);
    CHECK(s.head == whole);
  }
}

TEST_CASE("misuse: each refused with its status and the value named; the plan goes on", "[split_phase]") {
  if (g_thread_single || world_size() < 2) return;
  Setup s(64, 8, 4);
  const std::vector<Bytes> whole = s.whole();
  const int32_t most = s.info.max_head_chunks;
  REQUIRE(most == (8 + world_size() - 1) / world_size());
  // Every rank makes the same mistake: each reports its own error (the exchange did not happen anywhere).
  require_error(s.start(0, 0), BASP_ERROR_INVALID_ARGUMENT, "head chunk count (0)");
  require_error(s.start(0, most + 1), BASP_ERROR_INVALID_ARGUMENT,
                "head chunk count (" + std::to_string(most + 1) + ")");
  require_error(s.start(2, 2), BASP_ERROR_INVALID_ARGUMENT, "head chunk index (2)");
  require_error(s.start(-1, 2), BASP_ERROR_INVALID_ARGUMENT, "head chunk index (-1)");
  // A chunk in flight started again; another count than the open round's.
  s.poison();
  REQUIRE(s.start(0, 2) == BASP_SUCCESS);
  require_error(s.start(0, 2), BASP_ERROR_INVALID_ARGUMENT, "chunk 0 of 2 was started and not waited for");
  require_error(basp_scatter(s.plan, s.in().data(), s.out().data(), nullptr), BASP_ERROR_INVALID_ARGUMENT,
                "scatter chunk 0 of the plan is started and not waited for");
  REQUIRE(basp_scatter_wait(s.plan, 0) == BASP_SUCCESS);
  require_error(basp_scatter_wait(s.plan, 0), BASP_ERROR_INVALID_ARGUMENT, "chunk 0 is not started");
  if (most >= 3) {
    require_error(s.start(1, 3), BASP_ERROR_INVALID_ARGUMENT,
                  "num_chunks (3) differs from the open round's (2, 1 of its chunks started)");
  }
  require_error(s.start(0, 2), BASP_ERROR_INVALID_ARGUMENT, "chunk 0 was already started in this round of 2");
  require_error(basp_scatter(s.plan, s.in().data(), s.out().data(), nullptr), BASP_ERROR_INVALID_ARGUMENT,
                "a round of 2 scatter chunks is open (1 started)");
  REQUIRE(s.start(1, 2) == BASP_SUCCESS);
  REQUIRE(basp_scatter_wait(s.plan, 1) == BASP_SUCCESS);
  CHECK(s.head == whole);
  // A chunk started and not waited for, done by now: its next start is refused, and it can still be waited for.
  s.poison();
  REQUIRE(s.start(0, 1) == BASP_SUCCESS);
  int32_t done = 0;
  while (done == 0) REQUIRE(basp_scatter_test(s.plan, 0, &done) == BASP_SUCCESS);
  require_error(s.start(0, 1), BASP_ERROR_INVALID_ARGUMENT, "chunk 0 of 1 was started and not waited for");
  REQUIRE(basp_scatter_wait(s.plan, 0) == BASP_SUCCESS);
  CHECK(s.head == whole);
  // ... or at the next one-call execute.
  REQUIRE(s.start(0, 1) == BASP_SUCCESS);
  done = 0;
  while (done == 0) REQUIRE(basp_scatter_test(s.plan, 0, &done) == BASP_SUCCESS);
  require_error(basp_scatter(s.plan, s.in().data(), s.out().data(), nullptr), BASP_ERROR_INVALID_ARGUMENT,
                "scatter chunk 0 of the plan is started and not waited for");
  REQUIRE(basp_scatter_wait(s.plan, 0) == BASP_SUCCESS);
  // Test and wait of chunks never started, a NULL done, a NULL plan.
  require_error(basp_gather_wait(s.plan, 0), BASP_ERROR_INVALID_ARGUMENT, "chunk 0 is not started");
  require_error(basp_scatter_test(s.plan, most, &done), BASP_ERROR_INVALID_ARGUMENT,
                "chunk (" + std::to_string(most) + ") is outside 0..");
  require_error(basp_scatter_test(s.plan, 0, nullptr), BASP_ERROR_NULL_POINTER, "done is NULL");
  require_error(basp_scatter_wait(nullptr, 0), BASP_ERROR_INVALID_HANDLE, "plan");
  // The comm is still usable: a one-call scatter.
  CHECK(s.whole() == whole);
}

TEST_CASE("a gather that sums held heads: chunks in order, no scatter of the plan between them", "[split_phase]") {
  if (g_thread_single || world_size() < 2) return;
  // GQA: 6 query heads, 3 KV heads over 2 or 4 ranks: some KV head is held by two ranks (replicated).
  Setup s(16, 6, 4, 0, {0, 6, 6}, {6, 3, 3});
  REQUIRE(s.info.replicated == 1);
  const int32_t most = s.info.max_head_chunks;
  REQUIRE(most >= 2);
  std::vector<Bytes> back;
  for (int t = 0; t < 3; ++t) back.emplace_back(s.seq[static_cast<size_t>(t)].size(), kPoison);
  std::vector<const void*> gin = {s.head[0].data(), s.head[1].data(), s.head[2].data()};
  std::vector<void*> gout = {back[0].data(), back[1].data(), back[2].data()};
  require_error(basp_gather_start(s.plan, 1, 2, -1, gin.data(), gout.data(), nullptr), BASP_ERROR_INVALID_ARGUMENT,
                "start in order: expected chunk 0, got 1");
  REQUIRE(basp_gather_start(s.plan, 0, 2, -1, gin.data(), gout.data(), nullptr) == BASP_SUCCESS);
  require_error(s.start(0, 2), BASP_ERROR_INVALID_ARGUMENT, "no scatter of this plan may run between them");
  REQUIRE(basp_gather_start(s.plan, 1, 2, -1, gin.data(), gout.data(), nullptr) == BASP_SUCCESS);
  REQUIRE(basp_gather_wait(s.plan, 1) == BASP_SUCCESS);
  REQUIRE(basp_gather_wait(s.plan, 0) == BASP_SUCCESS);
  REQUIRE(s.start(0, 2) == BASP_SUCCESS);  // the gather's round is closed
  REQUIRE(basp_scatter_wait(s.plan, 0) == BASP_SUCCESS);
  REQUIRE(s.start(1, 2) == BASP_SUCCESS);
  REQUIRE(basp_scatter_wait(s.plan, 1) == BASP_SUCCESS);
}

TEST_CASE("ranks on different chunks: MISMATCH naming both from the wait; the next round works", "[split_phase]") {
  if (g_thread_single || world_size() < 2) return;
  Setup s(64, 8, 4);
  const std::vector<Bytes> whole = s.whole();
  const bool zero = world_rank() == 0;
  for (const int32_t round : {0, 1}) {
    const int32_t mine = zero ? 1 - round : round;  // rank 0 on chunk 1 then 0, the others on 0 then 1
    REQUIRE(s.start(mine, 2) == BASP_SUCCESS);
    require_error(basp_scatter_wait(s.plan, mine), BASP_ERROR_MISMATCH, "head chunk " + std::to_string(1 - mine));
    CHECK(last_error().find("head chunk " + std::to_string(mine) + " of 2") != std::string::npos);
  }
  s.poison();
  for (int32_t c = 0; c < 2; ++c) REQUIRE(s.start(c, 2) == BASP_SUCCESS);
  for (int32_t c = 0; c < 2; ++c) REQUIRE(basp_scatter_wait(s.plan, c) == BASP_SUCCESS);
  CHECK(s.head == whole);
}

TEST_CASE("destroying a plan with chunks in flight: waited for; alone, TIMEOUT and no hang", "[split_phase]") {
  if (g_thread_single || world_size() < 2) return;
  {
    Setup s(64, 8, 4);
    REQUIRE(s.start(0, 2) == BASP_SUCCESS);
    REQUIRE(s.start(1, 2) == BASP_SUCCESS);
    CHECK(basp_plan_destroy(s.plan) == BASP_SUCCESS);  // every rank: the chunks run, then the plan goes
    s.plan = nullptr;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Setup s(64, 8, 4, 400);
    if (world_rank() == 0) {  // alone: its chunk waits for peers that never come
      const auto t0 = Clock::now();
      REQUIRE(s.start(0, 2) == BASP_SUCCESS);
      REQUIRE(s.start(1, 2) == BASP_SUCCESS);
      require_error(basp_plan_destroy(s.plan), BASP_ERROR_TIMEOUT, "");
      s.plan = nullptr;
      CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 5.0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("without MPI_THREAD_MULTIPLE: UNSUPPORTED naming the level; one-call exchanges still work", "[split_phase]") {
  if (!g_thread_single || world_size() < 2) return;
  Setup s(64, 8, 4);
  const std::vector<Bytes> whole = s.whole();
  require_error(s.start(0, 2), BASP_ERROR_UNSUPPORTED, "MPI provides MPI_THREAD_SINGLE");
  CHECK(s.whole() == whole);
}

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  const auto single =
      std::find_if(args.begin(), args.end(), [](const char* a) { return std::strcmp(a, "--thread-single") == 0; });
  g_thread_single = single != args.end();
  if (g_thread_single) args.erase(single);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, g_thread_single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE, &provided);
  return basp::test::run_catch_session_on_all_ranks(static_cast<int>(args.size()), args.data());
}
