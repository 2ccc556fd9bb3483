// Destroy orders (docs/reliability.md): a plan keeps what it needs alive after its comm handle is destroyed;
// basp_mem_alloc memory stays valid for the plans using it; a destroyed or foreign handle is reported, never
// dereferenced; double destroys are errors, not crashes. Run under ASan (scripts/test.sh) a use-after-free here
// fails the test. Runs under mpirun with 1 or more ranks.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "exchange_check.h"

namespace {

int g_size = 0;

std::string last() { return basp_last_error(); }

basp_comm_t make_comm() {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  return comm;
}

basp_plan_desc_t desc(int64_t head_dim = 4) { return basp::test::byte_bshd_desc(4 * g_size, head_dim, 2, g_size); }

basp_plan_t make_plan(basp_comm_t comm, const basp_plan_desc_t& d) {
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS);
  return plan;
}

}  // namespace

TEST_CASE("plans before the comm", "[lifetime]") {
  basp_comm_t comm = make_comm();
  const basp_plan_desc_t d = desc();
  basp_plan_t a = make_plan(comm, d);
  basp_plan_t b = make_plan(comm, desc(8));
  CHECK(basp_plan_destroy(a) == BASP_SUCCESS);
  // The other plan and the comm are untouched by it.
  CHECK(basp::test::exchange_is_exact(comm, b, desc(8), 1));
  CHECK(basp_plan_destroy(b) == BASP_SUCCESS);
  basp_plan_t c = make_plan(comm, d);
  CHECK(basp::test::exchange_is_exact(comm, c, d, 2));
  CHECK(basp_plan_destroy(c) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

TEST_CASE("the comm before its plans: the plans keep working", "[lifetime]") {
  basp_comm_t comm = make_comm();
  const basp_plan_desc_t d = desc();
  basp_plan_t a = make_plan(comm, d);
  basp_plan_t b = make_plan(comm, d);
  // Buffers need the comm's answers: prepare them first.
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 3);
  basp::test::ExchangeBuffers want = x;
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  CHECK(basp_comm_query(comm, -1, 0, &info) == BASP_ERROR_INVALID_HANDLE);
  for (basp_plan_t p : {a, b}) {
    for (auto& v : x.head) std::fill(v.begin(), v.end(), basp::test::kPoison);
    for (auto& v : x.back) std::fill(v.begin(), v.end(), basp::test::kPoison);
    const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
    void* out[2] = {x.head[0].data(), x.head[1].data()};
    CHECK(basp_scatter(p, in, out, nullptr) == BASP_SUCCESS);
    const void* hin[2] = {x.head[0].data(), x.head[1].data()};
    void* back[2] = {x.back[0].data(), x.back[1].data()};
    CHECK(basp_gather(p, hin, back, nullptr) == BASP_SUCCESS);
    CHECK(x.back == want.seq);
  }
  CHECK(basp_plan_destroy(a) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(b) == BASP_SUCCESS);
}

TEST_CASE("double destroys and destroyed handles are errors, not crashes", "[lifetime]") {
  basp_comm_t comm = make_comm();
  basp_plan_t plan = make_plan(comm, desc());
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(plan) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("not a live basp_plan_t"));
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  CHECK(basp_plan_query(plan, &info) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("not a live basp_comm_t"));
  basp_plan_t p2 = nullptr;
  const basp_plan_desc_t d = desc();
  CHECK(basp_plan_create(comm, &d, &p2) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_mem_free(comm, nullptr) == BASP_ERROR_INVALID_HANDLE);
  // A plan handle passed as a comm and the other way round.
  basp_comm_t c2 = make_comm();
  basp_plan_t p3 = make_plan(c2, d);
  CHECK(basp_comm_destroy(reinterpret_cast<basp_comm_t>(p3)) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_plan_destroy(reinterpret_cast<basp_plan_t>(c2)) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_plan_destroy(p3) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(c2) == BASP_SUCCESS);
}

TEST_CASE("basp_mem_alloc memory: freed with its comm, or kept by the plans using it", "[lifetime]") {
  const basp_plan_desc_t d = desc(256);
  basp_comm_t comm = make_comm();
  basp_plan_t plan = make_plan(comm, d);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm, d, 4);
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  REQUIRE(basp_comm_query(comm, -1, d.seq_len, &me) == BASP_SUCCESS);
  std::vector<void*> shared(2, nullptr);
  for (int t = 0; t < 2; ++t) REQUIRE(basp_mem_alloc(comm, x.head[t].size(), &shared[t]) == BASP_SUCCESS);
  // The comm goes first; the plan still runs with its head-sharded tensors in the shared memory.
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(basp_mem_free(comm, shared[0]) == BASP_ERROR_INVALID_HANDLE);  // the handle is gone, not the memory
  const void* in[2] = {x.seq[0].data(), x.seq[1].data()};
  void* out[2] = {shared[0], shared[1]};
  CHECK(basp_scatter(plan, in, out, nullptr) == BASP_SUCCESS);
  for (int t = 0; t < 2; ++t) std::memcpy(x.head[t].data(), shared[t], x.head[t].size());
  CHECK(basp::test::head_output_exact(me, d, 4, x));
  const void* hin[2] = {shared[0], shared[1]};
  void* back[2] = {x.back[0].data(), x.back[1].data()};
  CHECK(basp_gather(plan, hin, back, nullptr) == BASP_SUCCESS);
  CHECK(x.back == x.seq);
  basp_plan_info_t after = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &after) == BASP_SUCCESS);
  if (g_size > 1) CHECK(after.last_path == BASP_PATH_SHARED);
  // The memory goes with the last plan.
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);

  // Freed before the comm: fine, and freeing it again is named.
  basp_comm_t c2 = make_comm();
  void* p = nullptr;
  REQUIRE(basp_mem_alloc(c2, 4096, &p) == BASP_SUCCESS);
  static_cast<char*>(p)[4095] = 1;
  CHECK(basp_mem_free(c2, p) == BASP_SUCCESS);
  CHECK(basp_mem_free(c2, p) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("was not returned by basp_mem_alloc on this comm, or was freed"));
  CHECK(basp_comm_destroy(c2) == BASP_SUCCESS);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
