// Thread safety (docs/reliability.md), meant for the ThreadSanitizer build: with MPI_THREAD_MULTIPLE, several
// threads per rank each drive their own comm (created from their own duplicate of MPI_COMM_WORLD) and plans:
// creation, exchanges checked bit for bit, basp_mem_alloc/free, destruction; meanwhile an observer thread
// queries a comm and a plan that another thread is executing (the calls documented as callable from any thread
// at any time). Then several threads execute different plans of one comm at the same time (allowed: their control
// messages travel on one communicator, each plan on its own tag), every exchange checked bit for bit. Exits 77
// (skipped) when MPI does not provide MPI_THREAD_MULTIPLE.
//
// usage: test_threads [threads] [iterations]
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "exchange_check.h"

namespace {

std::atomic<int> g_failures{0};
int g_rank = 0;
int g_size = 0;

void fail(int thread, const char* what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d thread %d: %s: %s\n", g_rank, thread, what, basp_last_error());
}

basp_plan_desc_t desc(int thread) { return basp::test::byte_bshd_desc(4 * g_size, 16 + 8 * thread, 2, g_size); }

struct Shared {
  std::atomic<basp_comm_t> comm{nullptr};
  std::atomic<basp_plan_t> plan{nullptr};
  std::atomic<bool> done{false};
};

void work(int thread, MPI_Comm parent, int iterations, Shared* shared);

void worker(int thread, MPI_Comm parent, int iterations, Shared* shared) {
  work(thread, parent, iterations, shared);
  if (thread == 0) shared->done = true;  // also when the thread gave up early: the observer must not wait forever
}

void work(int thread, MPI_Comm parent, int iterations, Shared* shared) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1 + thread % 2;  // a different group structure per thread where N allows
  if (g_size % c.micro_batch != 0) c.micro_batch = 1;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  c.timeout_ms = 120000;
  basp_comm_t comm = nullptr;
  if (basp_comm_create_mpi(MPI_Comm_c2f(parent), &c, &comm) != BASP_SUCCESS) return fail(thread, "comm create");
  const basp_plan_desc_t d = desc(thread);
  basp_plan_t plan = nullptr;
  if (basp_plan_create(comm, &d, &plan) != BASP_SUCCESS) return fail(thread, "plan create");
  if (thread == 0) {
    shared->comm = comm;
    shared->plan = plan;
  }
  for (int i = 0; i < iterations; ++i) {
    if (!basp::test::exchange_is_exact(comm, plan, d, static_cast<uint64_t>(thread * 1000 + i))) {
      fail(thread, "exchange");
    }
    void* mem = nullptr;
    if (basp_mem_alloc(comm, 4096, &mem) != BASP_SUCCESS) fail(thread, "mem alloc");
    if (basp_mem_free(comm, mem) != BASP_SUCCESS) fail(thread, "mem free");
  }
  if (thread == 0) {
    shared->done = true;
    // Wait for the observer to let go before destroying what it looks at.
    while (shared->comm.load() != nullptr) std::this_thread::yield();
  }
  // Plans and comms of other threads are destroyed concurrently with these.
  if (basp_comm_destroy(comm) != BASP_SUCCESS) fail(thread, "comm destroy");
  if (basp_plan_destroy(plan) != BASP_SUCCESS) fail(thread, "plan destroy");
}

// Read-only calls on thread 0's comm and plan while it executes.
void observer(Shared* shared) {
  while (shared->comm.load() == nullptr && !shared->done) std::this_thread::yield();
  basp_comm_t comm = shared->comm;
  basp_plan_t plan = shared->plan;
  int calls = 0;
  while (comm != nullptr && !shared->done) {
    basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
    if (basp_comm_query(comm, -1, 0, &info) != BASP_SUCCESS) fail(-1, "query");
    basp_plan_info_t pinfo = BASP_PLAN_INFO_INITIALIZER;
    if (basp_plan_query(plan, &pinfo) != BASP_SUCCESS) fail(-1, "plan query");
    basp_status_t error = BASP_ERROR_INTERNAL;
    if (basp_comm_get_async_error(comm, &error, nullptr, 0) != BASP_SUCCESS || error != BASP_SUCCESS) {
      fail(-1, "async error");
    }
    if (basp_status_string(BASP_ERROR_TIMEOUT)[0] != 'B') fail(-1, "status string");
    ++calls;
  }
  if (calls == 0 && comm != nullptr) std::fprintf(stderr, "rank %d: the observer made no call\n", g_rank);
  shared->comm = nullptr;
}

// Threads executing different plans of one comm at once: plans are made on the main thread (creation is one
// collective call per comm at a time), then each thread runs its own plan.
void one_comm_many_plans(MPI_Comm parent, int threads, int iterations) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  c.timeout_ms = 120000;
  basp_comm_t comm = nullptr;
  if (basp_comm_create_mpi(MPI_Comm_c2f(parent), &c, &comm) != BASP_SUCCESS) return fail(-1, "shared comm create");
  std::vector<basp_plan_desc_t> descs;
  std::vector<basp_plan_t> plans;
  for (int t = 0; t < threads; ++t) {
    descs.push_back(desc(t));
    basp_plan_t plan = nullptr;
    if (basp_plan_create(comm, &descs.back(), &plan) != BASP_SUCCESS) fail(t, "shared comm: plan create");
    plans.push_back(plan);
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      if (plans[static_cast<size_t>(t)] == nullptr) return;
      for (int i = 0; i < iterations; ++i) {
        if (!basp::test::exchange_is_exact(comm, plans[static_cast<size_t>(t)], descs[static_cast<size_t>(t)],
                                           static_cast<uint64_t>(7000 + t * 100 + i))) {
          fail(t, "shared comm: exchange");
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (basp_plan_t plan : plans) basp_plan_destroy(plan);
  basp_comm_destroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (g_rank == 0) std::printf("skipped: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
    MPI_Finalize();
    return 77;
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 3;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  // One parent communicator per thread, created here in the same order on every rank.
  std::vector<MPI_Comm> parents(static_cast<size_t>(threads), MPI_COMM_NULL);
  for (auto& p : parents) MPI_Comm_dup(MPI_COMM_WORLD, &p);
  Shared shared;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, parents[static_cast<size_t>(t)], iterations, &shared);
  std::thread watch(observer, &shared);
  for (auto& th : pool) th.join();
  watch.join();
  one_comm_many_plans(parents[0], threads, iterations);
  for (auto& p : parents) MPI_Comm_free(&p);
  int mine = g_failures.load();
  int worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d threads x %d iterations: %s\n", threads, iterations, worst ? "FAILED" : "passed");
  MPI_Finalize();
  return worst ? 1 : 0;
}
