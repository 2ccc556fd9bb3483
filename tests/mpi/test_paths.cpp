// Every exchange path of the MPI backend is the one chosen and costs its documented number of control rounds
// (src/transport/mpi/exchange_path.h, docs/design.md): local 0, p2p 1, cma 2, staged 2, shared 2, and a staged
// exchange whose head-sharded tensors are in basp_mem_alloc memory on some ranks only 3. The rounds are read from
// the executor's internal counter, so this program compiles the C ABI in and reaches the plan behind its handle.
// Every exchange is also checked bit for bit (tests/mpi/exchange_check.h's pattern, outputs poisoned).
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "capi/handles.h"
#include "catch_mpi_session.h"
#include "exchange_check.h"
#include "mpi_world.h"

namespace {

using basp::test::world_rank;
using basp::test::world_size;

std::string last() { return basp_last_error(); }

// Where the head-sharded tensors (scatter outputs, gather inputs) live.
enum class Heads { kHost, kShared, kSharedOnRankZero };

struct Case {
  const char* transport;  // BASP_MPI_TRANSPORT, nullptr: unset (auto)
  int64_t micro_batch;    // N: K = 1; 1: K = N
  Heads heads;
  basp_path_t plan_path;
  basp_path_t last_path;
  int32_t rounds;
};

int32_t rounds_of(basp_plan_t plan) { return basp::capi::plan_ref(plan, "plan")->executor().last_control_rounds(); }

void run(const Case& c) {
  const int n = world_size();
  if (c.transport) {
    setenv("BASP_MPI_TRANSPORT", c.transport, 1);
  } else {
    unsetenv("BASP_MPI_TRANSPORT");
  }
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = c.micro_batch;
  cfg.placement = BASP_PLACEMENT_CONTIGUOUS;
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
  // Rows of 2 KiB (tensor 0) and 1 KiB: every path takes them.
  const basp_plan_desc_t d = basp::test::byte_bshd_desc(4 * n, 1024, 2, n);
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  CHECK(info.plan_path == c.plan_path);
  CHECK(info.last_path == BASP_PATH_NONE);

  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 77);
  std::vector<void*> heads(static_cast<size_t>(d.num_tensors), nullptr);
  const bool mine_shared = c.heads == Heads::kShared || (c.heads == Heads::kSharedOnRankZero && world_rank() == 0);
  for (int32_t t = 0; t < d.num_tensors; ++t) {
    void* shared = nullptr;
    if (c.heads != Heads::kHost) REQUIRE(basp_mem_alloc(comm, x.head[t].size(), &shared) == BASP_SUCCESS);
    if (mine_shared) {
      std::memset(shared, basp::test::kPoison, x.head[t].size());
      heads[t] = shared;
    } else {
      heads[t] = x.head[t].data();
    }
  }
  const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
  const void* head_in[2] = {heads[0], heads[1]};
  void* back[2] = {x.back[0].data(), x.back[1].data()};

  REQUIRE(basp_scatter(plan, in, heads.data(), nullptr) == BASP_SUCCESS);
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  CHECK(info.last_path == c.last_path);
  CHECK(rounds_of(plan) == c.rounds);
  for (int32_t t = 0; t < d.num_tensors; ++t) std::memcpy(x.head[t].data(), heads[t], x.head[t].size());
  CHECK(basp::test::head_output_exact(comm, d, 77, x));

  REQUIRE(basp_gather(plan, head_in, back, nullptr) == BASP_SUCCESS);
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  CHECK(info.last_path == c.last_path);
  CHECK(rounds_of(plan) == c.rounds);
  CHECK(x.back == x.seq);

  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);  // its basp_mem_alloc memory goes with it
  unsetenv("BASP_MPI_TRANSPORT");
}

}  // namespace

TEST_CASE("K = 1: the local path, no control round", "[paths]") {
  run({nullptr, world_size(), Heads::kHost, BASP_PATH_LOCAL, BASP_PATH_LOCAL, 0});
}

TEST_CASE("p2p: one control round", "[paths]") {
  if (world_size() < 2) return;
  run({"p2p", 1, Heads::kHost, BASP_PATH_P2P, BASP_PATH_P2P, 1});
}

TEST_CASE("cma: two control rounds; shared memory instead when every rank's tensors are in it", "[paths]") {
  if (world_size() < 2) return;
  run({"cma", 1, Heads::kHost, BASP_PATH_CMA, BASP_PATH_CMA, 2});
  run({"direct", 1, Heads::kHost, BASP_PATH_CMA, BASP_PATH_CMA, 2});
  run({"cma", 1, Heads::kShared, BASP_PATH_CMA, BASP_PATH_SHARED, 2});
}

TEST_CASE("staged (the default on one node): two control rounds; shared two; shared on some ranks three", "[paths]") {
  if (world_size() < 2) return;
  run({nullptr, 1, Heads::kHost, BASP_PATH_STAGED, BASP_PATH_STAGED, 2});
  run({"staged", 1, Heads::kHost, BASP_PATH_STAGED, BASP_PATH_STAGED, 2});
  run({nullptr, 1, Heads::kShared, BASP_PATH_STAGED, BASP_PATH_SHARED, 2});
  run({nullptr, 1, Heads::kSharedOnRankZero, BASP_PATH_STAGED, BASP_PATH_STAGED, 3});
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
