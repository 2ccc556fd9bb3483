// Timeouts and broken comms (docs/reliability.md). One scenario per run, under mpirun: the last rank ("late")
// does not make a collective call that the others make; the others must fail with BASP_ERROR_TIMEOUT within the
// comm's timeout plus a margin, naming the call, the group and (point-to-point) the missing rank; every later
// call on their comm or its plans must fail at once with BASP_ERROR_COMM_BROKEN; destroying must work. Then the
// late rank makes its call after all: it must fail too (or, where MPI had already delivered every byte it needs,
// succeed with exact data): never a hang, never a wrong result. Every process then finalizes cleanly. Two scenarios
// are mismatches instead (mixed_ops, other_plan): the first control round names every rank's exchange.
//
// usage: test_timeout <scenario> [timeout_ms]   (-1: config->timeout_ms unset, BASP_TIMEOUT_MS decides)
//   plan_create | mem_alloc | comm_create | scatter | gather | scatter_large | mixed_ops | other_plan |
//   bad_buffers | plan_unmade
// BASP_MPI_TRANSPORT (set by CTest) picks the exchange path. Prints each rank's measured time to error.
#include <mpi.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "exchange_check.h"

namespace {

int g_rank = 0;
int g_size = 0;
int g_failures = 0;
int64_t g_timeout_ms = 1000;      // what the comm's timeout is
int64_t g_config_timeout = 1000;  // what the test passes in config->timeout_ms (-1: BASP_TIMEOUT_MS decides)
// The margin over the timeout that a rank may take to report it: polling, scheduling on an oversubscribed
// 2-core CI machine. The measured figures are far below it (docs/reliability.md).
constexpr int64_t kMarginMs = 3000;
MPI_Comm g_control = MPI_COMM_NULL;  // the test's own synchronisation, never given to libbasp

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      ++g_failures;                                                                    \
      std::fprintf(stderr, "rank %d: FAILED %s (line %d): ", g_rank, #cond, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
    }                                                                                  \
  } while (0)

bool is_late() { return g_rank == g_size - 1; }
std::string last() { return basp_last_error(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

using Clock = std::chrono::steady_clock;
int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

basp_comm_t make_comm(MPI_Comm parent, int64_t micro_batch = 1) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = micro_batch;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  c.timeout_ms = g_config_timeout;
  basp_comm_t comm = nullptr;
  const basp_status_t st = basp_comm_create_mpi(MPI_Comm_c2f(parent), &c, &comm);
  if (st != BASP_SUCCESS) {
    std::fprintf(stderr, "rank %d: comm creation failed: %s\n", g_rank, last().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return comm;
}

basp_plan_desc_t desc(int64_t head_dim) { return basp::test::byte_bshd_desc(8 * g_size, head_dim, 2, g_size); }

basp_plan_t make_plan(basp_comm_t comm, const basp_plan_desc_t& d) {
  basp_plan_t plan = nullptr;
  if (basp_plan_create(comm, &d, &plan) != BASP_SUCCESS) {
    std::fprintf(stderr, "rank %d: plan creation failed: %s\n", g_rank, last().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return plan;
}

// The timed-out call's report: status, time and message.
void expect_timeout(basp_status_t st, int64_t elapsed_ms, const char* call, const std::string& where,
                    const char* role) {
  std::printf("rank %d (%s): %s -> %s after %lld ms (timeout %lld ms)\n", g_rank, role, call, basp_status_string(st),
              static_cast<long long>(elapsed_ms), static_cast<long long>(g_timeout_ms));
  EXPECT(st == BASP_ERROR_TIMEOUT, "%s returned %s: %s", call, basp_status_string(st), last().c_str());
  EXPECT(elapsed_ms >= g_timeout_ms - 5, "%s gave up after %lld ms, before its timeout", call,
         static_cast<long long>(elapsed_ms));
  EXPECT(elapsed_ms <= g_timeout_ms + kMarginMs, "%s took %lld ms", call, static_cast<long long>(elapsed_ms));
  EXPECT(contains(last(), std::string(call) + ": timed out after"), "message: %s", last().c_str());
  EXPECT(contains(last(), where), "message lacks '%s': %s", where.c_str(), last().c_str());
  EXPECT(contains(last(), "the comm is broken from now on"), "message: %s", last().c_str());
}

// After a timeout: every call on the comm and its plans fails at once, naming the cause; destroying works.
void expect_broken(basp_comm_t comm, basp_plan_t plan, const basp_plan_desc_t& d) {
  const auto t0 = Clock::now();
  auto broken = [&](basp_status_t st, const char* call) {
    EXPECT(st == BASP_ERROR_COMM_BROKEN, "%s on a broken comm returned %s: %s", call, basp_status_string(st),
           last().c_str());
    EXPECT(contains(last(), "BASP_ERROR_TIMEOUT: ") && contains(last(), "timed out after"),
           "%s's message does not name the cause: %s", call, last().c_str());
  };
  basp_plan_t p2 = nullptr;
  broken(basp_plan_create(comm, &d, &p2), "basp_plan_create");
  EXPECT(p2 == nullptr, "a plan was returned");
  void* mem = nullptr;
  broken(basp_mem_alloc(comm, 64, &mem), "basp_mem_alloc");
  broken(basp_mem_free(comm, nullptr), "basp_mem_free");
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  broken(basp_comm_query(comm, -1, 0, &info), "basp_comm_query");
  int32_t ranks[64];
  broken(basp_comm_group_ranks(comm, 0, ranks, 64), "basp_comm_group_ranks");
  EXPECT(basp_comm_abort(comm) == BASP_ERROR_UNSUPPORTED, "abort of an MPI comm: %s", last().c_str());
  if (plan != nullptr) {
    // basp_comm_query fails on a broken comm: buffers of the plan's size, computed here.
    const size_t bytes = static_cast<size_t>(d.seq_len * d.num_heads[0] * d.head_dim);
    std::vector<uint8_t> a(bytes), b(bytes), c(bytes), e(bytes);
    const void* in[2] = {a.data(), b.data()};
    void* out[2] = {c.data(), e.data()};
    broken(basp_scatter(plan, in, out, nullptr), "basp_scatter");
    broken(basp_gather(plan, in, out, nullptr), "basp_gather");
    basp_plan_info_t pinfo = BASP_PLAN_INFO_INITIALIZER;
    broken(basp_plan_query(plan, &pinfo), "basp_plan_query");
  }
  const int64_t took = ms_since(t0);
  EXPECT(took < 100, "the broken-comm calls took %lld ms", static_cast<long long>(took));
  // The watchdog's query reports what broke the comm.
  basp_status_t error = BASP_SUCCESS;
  char message[512] = {0};
  EXPECT(basp_comm_get_async_error(comm, &error, message, sizeof(message)) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(error == BASP_ERROR_TIMEOUT, "async error %s", basp_status_string(error));
  EXPECT(contains(message, "timed out after"), "async message: %s", message);
}

// The late rank's own call, after the others gave up: a timeout, or (only where MPI had already delivered
// everything) success with exact data.
void expect_late_outcome(basp_status_t st, int64_t elapsed_ms, const char* call, bool may_succeed, bool exact) {
  std::printf("rank %d (late): %s -> %s after %lld ms\n", g_rank, call, basp_status_string(st),
              static_cast<long long>(elapsed_ms));
  if (st == BASP_SUCCESS) {
    EXPECT(may_succeed, "the late %s succeeded", call);
    EXPECT(exact, "the late %s succeeded with wrong data", call);
    return;
  }
  EXPECT(st == BASP_ERROR_TIMEOUT, "the late %s returned %s: %s", call, basp_status_string(st), last().c_str());
  EXPECT(elapsed_ms <= g_timeout_ms + kMarginMs, "the late %s took %lld ms", call, static_cast<long long>(elapsed_ms));
}

std::string group0() {
  return "group 0 (world ranks " + std::string(g_size == 2 ? "0, 1" : g_size == 3 ? "0..2" : "0..") + "";
}

// Scenarios ---------------------------------------------------------------------------------------------------

void scenario_plan_create(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d = desc(4);
  basp_plan_t plan = nullptr;
  if (!is_late()) {
    const auto t0 = Clock::now();
    const basp_status_t st = basp_plan_create(comm, &d, &plan);
    expect_timeout(st, ms_since(t0), "basp_plan_create", group0(), "waiting");
    EXPECT(plan == nullptr, "a plan was returned");
    EXPECT(contains(last(), "consistency check of basp_plan_create"), "%s", last().c_str());
    expect_broken(comm, nullptr, d);
    MPI_Barrier(g_control);
  } else {
    MPI_Barrier(g_control);
    const auto t0 = Clock::now();
    const basp_status_t st = basp_plan_create(comm, &d, &plan);
    expect_late_outcome(st, ms_since(t0), "basp_plan_create", false, false);
    EXPECT(plan == nullptr, "a plan was returned");
  }
  EXPECT(basp_comm_destroy(comm) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(basp_comm_destroy(comm) == BASP_ERROR_INVALID_HANDLE, "double destroy");
}

void scenario_mem_alloc(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d = desc(4);
  basp_plan_t plan = make_plan(comm, d);
  void* mem = nullptr;
  if (!is_late()) {
    const auto t0 = Clock::now();
    const basp_status_t st = basp_mem_alloc(comm, 1 << 16, &mem);
    expect_timeout(st, ms_since(t0), "basp_mem_alloc", group0(), "waiting");
    EXPECT(mem == nullptr, "memory was returned");
    expect_broken(comm, plan, d);
    MPI_Barrier(g_control);
  } else {
    MPI_Barrier(g_control);
    const auto t0 = Clock::now();
    const basp_status_t st = basp_mem_alloc(comm, 1 << 16, &mem);
    expect_late_outcome(st, ms_since(t0), "basp_mem_alloc", false, false);
  }
  // Destroy order: the comm first, its plan after.
  EXPECT(basp_comm_destroy(comm) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(basp_plan_destroy(plan) == BASP_SUCCESS, "%s", last().c_str());
}

void scenario_comm_create(MPI_Comm parent) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.timeout_ms = g_config_timeout;
  basp_comm_t comm = nullptr;
  if (!is_late()) {
    const auto t0 = Clock::now();
    const basp_status_t st = basp_comm_create_mpi(MPI_Comm_c2f(parent), &c, &comm);
    expect_timeout(st, ms_since(t0), "basp_comm_create_mpi",
                   "the parent communicator (" + std::to_string(g_size) + " ranks)", "waiting");
    EXPECT(comm == nullptr, "a comm was returned");
    MPI_Barrier(g_control);
  } else {
    MPI_Barrier(g_control);
    const auto t0 = Clock::now();
    const basp_status_t st = basp_comm_create_mpi(MPI_Comm_c2f(parent), &c, &comm);
    expect_late_outcome(st, ms_since(t0), "basp_comm_create_mpi", false, false);
    EXPECT(comm == nullptr, "a comm was returned");
  }
  // A new comm over another communicator still works on every rank.
  MPI_Comm fresh = MPI_COMM_NULL;
  MPI_Comm_dup(g_control, &fresh);
  basp_comm_t ok = make_comm(fresh);
  const basp_plan_desc_t d = desc(4);
  basp_plan_t plan = make_plan(ok, d);
  EXPECT(basp::test::exchange_is_exact(ok, plan, d, 3), "the exchange on a fresh comm is wrong: %s", last().c_str());
  basp_plan_destroy(plan);
  basp_comm_destroy(ok);
  MPI_Comm_free(&fresh);
}

// `op`: 0 scatter, 1 gather. The late rank skips the first exchange, then makes it after the others gave up.
void scenario_exchange(MPI_Comm parent, int op, int64_t head_dim) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d = desc(head_dim);
  basp_plan_t plan = make_plan(comm, d);
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 7);
  const char* call = op == 0 ? "basp_scatter" : "basp_gather";
  // A gather's input is a correct head-sharded tensor: take it from one good scatter first.
  if (op == 1) {
    const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
    void* out[2] = {x.head[0].data(), x.head[1].data()};
    EXPECT(basp_scatter(plan, in, out, nullptr) == BASP_SUCCESS, "%s", last().c_str());
  }
  auto run = [&]() {
    if (op == 0) {
      const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
      void* out[2] = {x.head[0].data(), x.head[1].data()};
      return basp_scatter(plan, in, out, nullptr);
    }
    const void* in[2] = {x.head[0].data(), x.head[1].data()};
    void* out[2] = {x.back[0].data(), x.back[1].data()};
    return basp_gather(plan, in, out, nullptr);
  };
  if (!is_late()) {
    const basp::test::ExchangeBuffers before = x;
    const auto t0 = Clock::now();
    const basp_status_t st = run();
    expect_timeout(st, ms_since(t0), call, group0(), "waiting");
    EXPECT(contains(last(), "still waiting for world rank " + std::to_string(g_size - 1)),
           "the missing rank is not named: %s", last().c_str());
    // Inputs are never written, whatever happened.
    EXPECT((op == 0 ? x.seq == before.seq : x.head == before.head), "an input was written");
    expect_broken(comm, plan, d);
    MPI_Barrier(g_control);
  } else {
    MPI_Barrier(g_control);
    // Poison what the late call writes; a gather reads the head-sharded tensor the first scatter produced.
    for (auto& v : op == 0 ? x.head : x.back) std::fill(v.begin(), v.end(), basp::test::kPoison);
    const auto t0 = Clock::now();
    const basp_status_t st = run();
    const int64_t took = ms_since(t0);
    // (basp_comm_query, which the check uses, fails once the comm is broken.)
    const bool exact = st == BASP_SUCCESS && (op == 0 ? basp::test::head_output_exact(comm, d, 7, x) : x.back == x.seq);
    // Point-to-point with small chunks: the others' sends were buffered by MPI before they gave up, and this
    // rank's sends are buffered too, so the late exchange may complete, with exact data. Large chunks need the
    // others' receives (cancelled) and the direct path needs their addresses (never sent): those time out.
    basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
    const bool p2p =
        st == BASP_SUCCESS && basp_plan_query(plan, &info) == BASP_SUCCESS && info.last_path == BASP_PATH_P2P;
    expect_late_outcome(st, took, call, p2p && head_dim < 1024, exact);
  }
  EXPECT(basp_plan_destroy(plan) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(basp_comm_destroy(comm) == BASP_SUCCESS, "%s", last().c_str());
}

// The late rank calls basp_gather while the others call basp_scatter on the same plan. On every path the first
// control round names each rank's exchange: a mismatch on every rank, at once, and the comm stays usable.
void scenario_mixed_ops(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d = desc(64);
  basp_plan_t plan = make_plan(comm, d);
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 9);
  const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
  void* out[2] = {x.head[0].data(), x.head[1].data()};
  const auto t0 = Clock::now();
  const basp_status_t st = is_late() ? basp_gather(plan, in, out, nullptr) : basp_scatter(plan, in, out, nullptr);
  const int64_t took = ms_since(t0);
  std::printf("rank %d: mixed operations -> %s after %lld ms\n", g_rank, basp_status_string(st),
              static_cast<long long>(took));
  EXPECT(st == BASP_ERROR_MISMATCH, "%s: %s", basp_status_string(st), last().c_str());
  const std::string others = g_size == 2 ? "0" : g_size == 3 ? "0, 1" : "0..";
  EXPECT(contains(last(), "not in the same operation of this plan: rank " + others), "%s", last().c_str());
  EXPECT(contains(last(), "rank " + std::to_string(g_size - 1) + " = basp_gather"), "%s", last().c_str());
  EXPECT(took < g_timeout_ms, "the mismatch took %lld ms", static_cast<long long>(took));
  EXPECT(basp::test::exchange_is_exact(comm, plan, d, 10), "the comm is not usable after the mismatch: %s",
         last().c_str());
  MPI_Barrier(g_control);
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
}

// The late rank executes another plan of the same comm than the others. Each rank finds its peers' control
// messages on the other plan's tag: a mismatch naming both sides on every rank, before the timeout, and the comm
// stays usable (both plans then exchange exactly).
void scenario_other_plan(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d1 = desc(4);
  const basp_plan_desc_t d2 = desc(8);
  basp_plan_t p1 = make_plan(comm, d1);
  basp_plan_t p2 = make_plan(comm, d2);
  const basp_plan_desc_t& mine = is_late() ? d2 : d1;
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, mine, 4);
  const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
  void* out[2] = {x.head[0].data(), x.head[1].data()};
  const auto t0 = Clock::now();
  const basp_status_t st = basp_scatter(is_late() ? p2 : p1, in, out, nullptr);
  const int64_t took = ms_since(t0);
  std::printf("rank %d (%s): basp_scatter -> %s after %lld ms (timeout %lld ms)\n", g_rank,
              is_late() ? "other plan" : "waiting", basp_status_string(st), static_cast<long long>(took),
              static_cast<long long>(g_timeout_ms));
  EXPECT(st == BASP_ERROR_MISMATCH, "%s: %s", basp_status_string(st), last().c_str());
  const std::string others = g_size == 2 ? "0" : g_size == 3 ? "0, 1" : "0..";
  EXPECT(contains(last(), "not in the same exchange: rank " + others + " = basp_scatter of plan #0 (exchange #0)"),
         "%s", last().c_str());
  EXPECT(contains(last(), "rank " + std::to_string(g_size - 1) + " = basp_scatter of plan #1 (exchange #0)"), "%s",
         last().c_str());
  EXPECT(took < g_timeout_ms, "the mismatch took %lld ms", static_cast<long long>(took));
  EXPECT(basp::test::exchange_is_exact(comm, p1, d1, 11), "plan 1 after the mismatch: %s", last().c_str());
  EXPECT(basp::test::exchange_is_exact(comm, p2, d2, 12), "plan 2 after the mismatch: %s", last().c_str());
  MPI_Barrier(g_control);
  // Destroy order: plans first, then the comm.
  EXPECT(basp_plan_destroy(p1) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(basp_plan_destroy(p2) == BASP_SUCCESS, "%s", last().c_str());
  EXPECT(basp_comm_destroy(comm) == BASP_SUCCESS, "%s", last().c_str());
}

// The late rank passes a NULL input while the others call basp_scatter correctly: it reports its own error, and its
// first control round, flagged, makes the others fail at once naming it; the comm stays usable.
void scenario_bad_buffers(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t d = desc(16);
  basp_plan_t plan = make_plan(comm, d);
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 21);
  const void* in[2] = {is_late() ? nullptr : x.seq[0].data(), x.seq[1].data()};
  void* out[2] = {x.head[0].data(), x.head[1].data()};
  const auto t0 = Clock::now();
  const basp_status_t st = basp_scatter(plan, in, out, nullptr);
  const int64_t took = ms_since(t0);
  std::printf("rank %d (%s): basp_scatter -> %s after %lld ms\n", g_rank, is_late() ? "bad buffers" : "waiting",
              basp_status_string(st), static_cast<long long>(took));
  if (is_late()) {
    EXPECT(st == BASP_ERROR_NULL_POINTER, "%s: %s", basp_status_string(st), last().c_str());
    EXPECT(contains(last(), "inputs[0] is NULL"), "%s", last().c_str());
  } else {
    EXPECT(st == BASP_ERROR_MISMATCH, "%s: %s", basp_status_string(st), last().c_str());
    EXPECT(contains(last(), "could not all make the exchange") &&
               contains(last(), "rank " + std::to_string(g_size - 1) +
                                    " = basp_scatter whose argument checks failed with BASP_ERROR_NULL_POINTER"),
           "%s", last().c_str());
  }
  EXPECT(took < g_timeout_ms, "the failure took %lld ms", static_cast<long long>(took));
  EXPECT(basp::test::exchange_is_exact(comm, plan, d, 22), "the comm is not usable after: %s", last().c_str());
  MPI_Barrier(g_control);
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
}

// The late rank cannot allocate its part of a plan (its address space is limited for the call): it reports
// BASP_ERROR_OUT_OF_MEMORY, and the plan's confirmation round makes the others fail with it at once instead of
// creating a plan whose exchanges would wait for that rank. The comm stays usable. Point-to-point path (its
// workspace is allocated after the path's collective steps).
void scenario_plan_unmade(MPI_Comm parent) {
  basp_comm_t comm = make_comm(parent);
  const basp_plan_desc_t big = basp::test::byte_bshd_desc(g_size * (int64_t{1} << 18), 128, 2, g_size);  // 100+ MiB
  rlimit before{};
  getrlimit(RLIMIT_AS, &before);
  if (is_late()) {
    // What is mapped now plus 64 MiB: the workspace (hundreds of MiB) cannot fit.
    rlimit tight = before;
    unsigned long pages = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f != nullptr && std::fscanf(f, "%lu", &pages) == 1) {
      tight.rlim_cur = pages * static_cast<unsigned long>(sysconf(_SC_PAGESIZE)) + (64ul << 20);
      setrlimit(RLIMIT_AS, &tight);
    }
    if (f != nullptr) std::fclose(f);
  }
  basp_plan_t plan = nullptr;
  const auto t0 = Clock::now();
  const basp_status_t st = basp_plan_create(comm, &big, &plan);
  const int64_t took = ms_since(t0);
  if (is_late()) setrlimit(RLIMIT_AS, &before);
  std::printf("rank %d (%s): basp_plan_create -> %s after %lld ms\n", g_rank, is_late() ? "no memory" : "waiting",
              basp_status_string(st), static_cast<long long>(took));
  EXPECT(st == BASP_ERROR_OUT_OF_MEMORY, "%s: %s", basp_status_string(st), last().c_str());
  EXPECT(plan == nullptr, "a plan was returned");
  if (!is_late()) {
    EXPECT(contains(last(), "world rank " + std::to_string(g_size - 1) + " of group 0") &&
               contains(last(), "could not make its part of the plan (BASP_ERROR_OUT_OF_MEMORY"),
           "%s", last().c_str());
  }
  EXPECT(took < g_timeout_ms, "the failure took %lld ms", static_cast<long long>(took));
  const basp_plan_desc_t d = desc(16);
  basp_plan_t small = make_plan(comm, d);
  EXPECT(basp::test::exchange_is_exact(comm, small, d, 23), "the comm is not usable after: %s", last().c_str());
  MPI_Barrier(g_control);
  basp_plan_destroy(small);
  basp_comm_destroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (argc > 2) g_config_timeout = g_timeout_ms = std::atoll(argv[2]);
  if (g_config_timeout == -1) {
    // The comm's timeout comes from the environment (CTest sets BASP_TIMEOUT_MS for this run).
    const char* env = std::getenv("BASP_TIMEOUT_MS");
    g_timeout_ms = env ? std::atoll(env) : BASP_DEFAULT_TIMEOUT_MS;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_control);
  // libbasp gets its own duplicate: a timed-out comm creation leaves an unfinished round on its parent, which
  // must not be one the test uses afterwards (docs/reliability.md). Never freed for the same reason.
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &parent);
  if (scenario == "plan_create") {
    scenario_plan_create(parent);
  } else if (scenario == "mem_alloc") {
    scenario_mem_alloc(parent);
  } else if (scenario == "comm_create") {
    scenario_comm_create(parent);
  } else if (scenario == "scatter") {
    scenario_exchange(parent, 0, 4);
  } else if (scenario == "scatter_large") {
    scenario_exchange(parent, 0, 4096);  // chunks far above the eager limit: rendezvous, then cancelled
  } else if (scenario == "gather") {
    scenario_exchange(parent, 1, 64);
  } else if (scenario == "mixed_ops") {
    scenario_mixed_ops(parent);
  } else if (scenario == "other_plan") {
    scenario_other_plan(parent);
  } else if (scenario == "bad_buffers") {
    scenario_bad_buffers(parent);
  } else if (scenario == "plan_unmade") {
    scenario_plan_unmade(parent);
  } else {
    if (g_rank == 0) std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    ++g_failures;
  }
  int worst = 0;
  MPI_Allreduce(&g_failures, &worst, 1, MPI_INT, MPI_MAX, g_control);
  if (g_rank == 0) std::printf("%s: %s\n", scenario.c_str(), worst == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
