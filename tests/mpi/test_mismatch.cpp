// Cross-rank consistency (docs/reliability.md): when one rank describes a collective call differently, every
// rank fails at once with BASP_ERROR_MISMATCH and a message naming the field, the values and the ranks holding
// them; nothing is created and the comm stays usable. Each case changes one field on the last rank only.
// Runs under mpirun with 2 or more ranks; with 4, also checks that two groups are checked separately.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "exchange_check.h"

namespace {

int g_rank = 0;
int g_size = 0;

std::string last() { return basp_last_error(); }
bool is_last() { return g_rank == g_size - 1; }

// How the message lists ranks 0..n-1 (the test's own statement of the format).
std::string ranks_below(int n) {
  if (n == 1) return "0";
  if (n == 2) return "0, 1";
  return "0.." + std::to_string(n - 1);
}

// "field: rank 0..2 = a, rank 3 = b" for a field where the last rank differs.
std::string clause(const std::string& field, const std::string& others, const std::string& lasts) {
  return field + ": rank " + ranks_below(g_size - 1) + " = " + others + ", rank " + std::to_string(g_size - 1) + " = " +
         lasts;
}

basp_comm_config_t config(int64_t b) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = b;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  c.timeout_ms = 60000;  // a hang would show as this test's CTest timeout, not as a pass
  return c;
}

basp_plan_desc_t qkv() { return basp::test::byte_bshd_desc(4 * g_size, 4, 3, g_size); }

struct World {
  basp_comm_t comm = nullptr;
  explicit World(int64_t b = 1) {
    const basp_comm_config_t c = config(b);
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  }
  ~World() { basp_comm_destroy(comm); }
};

// Every rank: the plan creation fails with `status_here` (the last rank: `status_last`) and creates nothing.
void expect_plan_failure(basp_comm_t comm, const basp_plan_desc_t& mine, const std::string& clause_text,
                         basp_status_t status_last = BASP_ERROR_MISMATCH) {
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(0x1);
  const basp_status_t st = basp_plan_create(comm, &mine, &plan);
  INFO("rank " << g_rank << ": " << last());
  CHECK(st == (is_last() ? status_last : BASP_ERROR_MISMATCH));
  CHECK(plan == nullptr);
  CHECK_THAT(last(), Catch::Contains(clause_text));
  if (st == BASP_SUCCESS) basp_plan_destroy(plan);
}

}  // namespace

TEST_CASE("plan creation: each field that differs on one rank is named on every rank", "[mismatch]") {
  World w;
  const std::string n = std::to_string(g_size);
  struct Case {
    const char* field;
    void (*edit)(basp_plan_desc_t&);
    std::string others, lasts;
  };
  const std::vector<Case> cases = {
      {"layout", [](basp_plan_desc_t& d) { d.layout = BASP_LAYOUT_SBHD; }, "BASP_LAYOUT_BSHD", "BASP_LAYOUT_SBHD"},
      {"dtype", [](basp_plan_desc_t& d) { d.dtype = BASP_DTYPE_FP32; }, "BASP_DTYPE_BYTE", "BASP_DTYPE_FP32"},
      {"seq_len", [](basp_plan_desc_t& d) { d.seq_len *= 2; }, std::to_string(4 * g_size), std::to_string(8 * g_size)},
      {"head_dim", [](basp_plan_desc_t& d) { d.head_dim = 8; }, "4", "8"},
      {"num_tensors", [](basp_plan_desc_t& d) { d.num_tensors = 2, d.num_heads[2] = 0; }, "3", "2"},
      {"num_heads[0]", [](basp_plan_desc_t& d) { d.num_heads[0] *= 2; }, std::to_string(2 * g_size),
       std::to_string(4 * g_size)},
      {"num_heads[1]", [](basp_plan_desc_t& d) { d.num_heads[1] *= 2; }, n, std::to_string(2 * g_size)},
      {"num_heads[2]", [](basp_plan_desc_t& d) { d.num_heads[2] *= 3; }, n, std::to_string(3 * g_size)},
  };
  for (const Case& c : cases) {
    INFO(c.field);
    basp_plan_desc_t d = qkv();
    if (is_last()) c.edit(d);
    expect_plan_failure(w.comm, d,
                        "the ranks of group 0 (world rank" + std::string(g_size > 1 ? "s " : " ") +
                            ranks_below(g_size) + ") called basp_plan_create with different arguments: ");
    expect_plan_failure(w.comm, d, clause(c.field, c.others, c.lasts));
  }
  // The comm is still usable: a matching plan moves its data bit for bit.
  const basp_plan_desc_t d = qkv();
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  CHECK(basp::test::exchange_is_exact(w.comm, plan, d, 11));
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

TEST_CASE("plan creation: a rank whose own checks fail does not make the others wait", "[mismatch]") {
  World w;
  const std::string passed = "passed";
  // A KV head count that does not divide its query heads: the last rank's own error, the others' mismatch.
  basp_plan_desc_t d = qkv();
  if (is_last()) d.query_heads[1] = d.num_heads[1] * 2 + 1;
  if (g_size > 1) {
    expect_plan_failure(w.comm, d, clause("argument checks", passed, "failed with BASP_ERROR_INVALID_ARGUMENT"),
                        BASP_ERROR_INVALID_ARGUMENT);
    if (is_last()) CHECK_THAT(last(), Catch::Contains("does not divide its query head count"));
  }
  // A NULL descriptor, a bad magic, a NULL output handle.
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(0x1);
  d = qkv();
  const basp_status_t st = basp_plan_create(w.comm, is_last() ? nullptr : &d, &plan);
  CHECK(st == (is_last() ? BASP_ERROR_NULL_POINTER : BASP_ERROR_MISMATCH));
  CHECK_THAT(last(), Catch::Contains(clause("argument checks", passed, "failed with BASP_ERROR_NULL_POINTER")));
  CHECK(plan == nullptr);
  if (is_last()) CHECK_THAT(last(), Catch::Contains("desc is NULL"));

  d = qkv();
  if (is_last()) d.magic = 7;
  expect_plan_failure(w.comm, d, clause("argument checks", passed, "failed with BASP_ERROR_BAD_STRUCT"),
                      BASP_ERROR_BAD_STRUCT);

  d = qkv();
  const basp_status_t st2 = basp_plan_create(w.comm, &d, is_last() ? nullptr : &plan);
  CHECK(st2 == (is_last() ? BASP_ERROR_NULL_POINTER : BASP_ERROR_MISMATCH));
  CHECK_THAT(last(), Catch::Contains(clause("argument checks", passed, "failed with BASP_ERROR_NULL_POINTER")));

  // Every rank with the same bad descriptor: the rank's own error everywhere, no mismatch.
  d = qkv();
  d.head_dim = 0;
  CHECK(basp_plan_create(w.comm, &d, &plan) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("head_dim (0)"));
  CHECK_THAT(last(), !Catch::Contains("MISMATCH"));
}

TEST_CASE("different collective calls on one comm are named", "[mismatch]") {
  World w;
  const basp_plan_desc_t d = qkv();
  basp_plan_t plan = nullptr;
  void* mem = reinterpret_cast<void*>(0x1);
  const basp_status_t st = is_last() ? basp_mem_alloc(w.comm, 4096, &mem) : basp_plan_create(w.comm, &d, &plan);
  INFO(last());
  CHECK(st == BASP_ERROR_MISMATCH);
  CHECK_THAT(last(), Catch::Contains("are not in the same collective call: " +
                                     clause("call", "basp_plan_create", "basp_mem_alloc")));
  CHECK(plan == nullptr);
  if (is_last()) CHECK(mem == nullptr);

  // basp_mem_free: NULL on every rank does nothing, NULL on one rank only is named.
  CHECK(basp_mem_free(w.comm, nullptr) == BASP_SUCCESS);
  REQUIRE(basp_mem_alloc(w.comm, 4096, &mem) == BASP_SUCCESS);
  CHECK(basp_mem_free(w.comm, is_last() ? nullptr : mem) == BASP_ERROR_MISMATCH);
  CHECK_THAT(last(), Catch::Contains(clause("ptr", "a pointer", "NULL")));
  CHECK(basp_mem_free(w.comm, mem) == BASP_SUCCESS);
}

TEST_CASE("comm creation: each field that differs on one rank is named on every rank", "[mismatch]") {
  const basp_mpi_fint_t world = MPI_Comm_c2f(MPI_COMM_WORLD);
  struct Case {
    const char* field;
    void (*edit)(basp_comm_config_t&);
    const char* others;
    const char* lasts;
    basp_status_t status_last;
  };
  const Case cases[] = {
      {"micro_batch", [](basp_comm_config_t& c) { c.micro_batch = 2; }, "1", "2", BASP_ERROR_MISMATCH},
      {"num_groups", [](basp_comm_config_t& c) { c.num_groups = 1; }, "-1", "1", BASP_ERROR_MISMATCH},
      {"placement", [](basp_comm_config_t& c) { c.placement = BASP_PLACEMENT_DEFAULT; }, "BASP_PLACEMENT_CONTIGUOUS",
       "BASP_PLACEMENT_DEFAULT", BASP_ERROR_MISMATCH},
      // A build without NCCL: the last rank's own error (one rule for every rank-local error), the others' MISMATCH.
      {"backend", [](basp_comm_config_t& c) { c.backend = BASP_BACKEND_NCCL; }, "BASP_BACKEND_MPI", "BASP_BACKEND_NCCL",
       BASP_HAVE_NCCL ? BASP_ERROR_MISMATCH : BASP_ERROR_UNSUPPORTED},
      {"reserved0", [](basp_comm_config_t& c) { c.reserved0 = 3; }, "0", "3", BASP_ERROR_INVALID_ARGUMENT},
  };
  for (const Case& c : cases) {
    INFO(c.field);
    basp_comm_config_t cfg = config(1);
    if (is_last()) c.edit(cfg);
    basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
    const basp_status_t st = basp_comm_create_mpi(world, &cfg, &comm);
    INFO("rank " << g_rank << ": " << last());
    CHECK(st == (is_last() ? c.status_last : BASP_ERROR_MISMATCH));
    if (is_last() && c.status_last == BASP_ERROR_UNSUPPORTED)
      CHECK_THAT(last(), Catch::Contains("without CUDA + NCCL"));
    CHECK(comm == nullptr);
    CHECK_THAT(last(), Catch::Contains("the ranks of the parent communicator (" + std::to_string(g_size) + " rank"));
    CHECK_THAT(last(), Catch::Contains(clause(c.field, c.others, c.lasts)));
  }
  // A NULL config on one rank.
  basp_comm_config_t cfg = config(1);
  basp_comm_t comm = nullptr;
  const basp_status_t st = basp_comm_create_mpi(world, is_last() ? nullptr : &cfg, &comm);
  CHECK(st == (is_last() ? BASP_ERROR_NULL_POINTER : BASP_ERROR_MISMATCH));
  CHECK_THAT(last(), Catch::Contains(clause("argument checks", "passed", "failed with BASP_ERROR_NULL_POINTER")));
  // Each rank its own timeout: not an argument the ranks must share.
  cfg = config(1);
  cfg.timeout_ms = 30000 + g_rank;
  REQUIRE(basp_comm_create_mpi(world, &cfg, &comm) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

TEST_CASE("groups are checked separately: a mismatch in one group leaves the other working", "[mismatch]") {
  if (g_size < 4 || g_size % 2 != 0) return;
  World w(2);  // two groups of N/2
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  REQUIRE(basp_comm_query(w.comm, -1, 0, &me) == BASP_SUCCESS);
  basp_plan_desc_t d = qkv();
  if (is_last()) d.num_heads[1] *= 2;
  basp_plan_t plan = nullptr;
  const basp_status_t st = basp_plan_create(w.comm, &d, &plan);
  INFO("rank " << g_rank << ": " << last());
  if (me.group_index == 0) {
    REQUIRE(st == BASP_SUCCESS);
    CHECK(basp::test::exchange_is_exact(w.comm, plan, d, 5));
    CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  } else {
    const int half = g_size / 2;
    CHECK(st == BASP_ERROR_MISMATCH);
    std::string others =
        half - 1 >= 3 ? std::to_string(half) + ".." + std::to_string(g_size - 2) : std::to_string(half);
    for (int r = half + 1; r < g_size - 1 && half - 1 < 3; ++r) others += ", " + std::to_string(r);
    CHECK_THAT(last(), Catch::Contains("group 1 (world ranks "));
    CHECK_THAT(last(), Catch::Contains("num_heads[1]: rank " + others + " = " + std::to_string(g_size) + ", rank " +
                                       std::to_string(g_size - 1) + " = " + std::to_string(2 * g_size)));
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
