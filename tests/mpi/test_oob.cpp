// basp_comm_create_oob under mpirun, with out-of-band callbacks implemented over MPI (MPI_Iallgather, MPI_Test): the
// MPI-free creation path as any framework would drive it. Every scenario runs on every rank and the statuses are
// gathered, so that a rank that succeeds or fails alone is caught:
//  - matching configs: the agreement and the readiness round run over the callbacks; without a usable CUDA device
//    (CI) every rank then fails with BASP_ERROR_CUDA, and with one GPU per rank the comm is made;
//  - a config that differs on one rank: BASP_ERROR_MISMATCH on every rank, naming the field;
//  - a config that is bad on one rank only: that rank names its argument, the others fail with BASP_ERROR_MISMATCH,
//    at once;
//  - a start that fails on every rank: BASP_ERROR_OOB on every rank; on one rank only: that rank at once, the others
//    after their timeout;
//  - a test that never completes: BASP_ERROR_TIMEOUT on every rank, after the timeout;
//  - a channel that is itself bad (NULL callbacks, bad magic, rank out of range): named at once.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"

namespace {

using basp::test::cuda_devices;
using basp::test::world_rank;
using basp::test::world_size;

using Clock = std::chrono::steady_clock;

// The callbacks' state: a duplicate of the world (the library's all-gathers never meet the test's own MPI calls)
// and the ways a test makes them misbehave.
struct Request {
  MPI_Request mpi = MPI_REQUEST_NULL;
};

struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  bool fail_start = false;  // allgather_start returns 7
  bool never_done = false;  // allgather_test says "in progress" forever
  int starts = 0;
  int frees = 0;
  std::vector<Request*> abandoned;  // freed by the library before they completed: finished by the test later
};

int start(void* user, const void* send, void* recv, size_t bytes, void** request) {
  auto* c = static_cast<Channel*>(user);
  ++c->starts;
  if (c->fail_start) return 7;
  auto* r = new Request();
  if (MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, c->comm,
                     &r->mpi) != MPI_SUCCESS) {
    delete r;
    return -1;
  }
  *request = r;
  return BASP_OOB_SUCCESS;
}

int test(void* user, void* request) {
  auto* c = static_cast<Channel*>(user);
  auto* r = static_cast<Request*>(request);
  if (c->never_done) return BASP_OOB_IN_PROGRESS;
  int done = 0;
  if (MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -2;
  return done ? BASP_OOB_SUCCESS : BASP_OOB_IN_PROGRESS;
}

int release(void* user, void* request) {
  auto* c = static_cast<Channel*>(user);
  ++c->frees;
  auto* r = static_cast<Request*>(request);
  int done = 0;
  MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE);
  if (done) {
    delete r;
  } else {
    // The library gave up on it (its timeout) and keeps its buffers alive: MPI cannot cancel a collective, so the
    // test completes it once every rank has joined (Fixture).
    c->abandoned.push_back(r);
  }
  return BASP_OOB_SUCCESS;
}

basp_oob_t make_oob(Channel& c) {
  basp_oob_t o = BASP_OOB_INITIALIZER;
  o.rank = world_rank();
  o.num_ranks = world_size();
  o.user_data = &c;
  o.allgather_start = &start;
  o.allgather_test = &test;
  o.allgather_free = &release;
  return o;
}

basp_comm_config_t nccl_config() {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = world_size();
  cfg.backend = BASP_BACKEND_NCCL;
  cfg.timeout_ms = 20000;
  return cfg;
}

std::string last() { return basp_last_error(); }

// Every rank's status, by rank.
std::vector<int> all_statuses(basp_status_t mine) {
  std::vector<int> all(static_cast<size_t>(world_size()));
  const int m = mine;
  MPI_Allgather(&m, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return all;
}

struct Created {
  basp_status_t status;
  basp_comm_t comm;
  std::string message;
  int64_t ms;
};

Created create(Channel& c, const basp_comm_config_t& cfg) {
  const basp_oob_t o = make_oob(c);
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  const auto t0 = Clock::now();
  const basp_status_t st = basp_comm_create_oob(&o, &cfg, &comm);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  return {st, comm, last(), static_cast<int64_t>(ms)};
}

struct Fixture {
  Channel c;
  Fixture() { MPI_Comm_dup(MPI_COMM_WORLD, &c.comm); }
  ~Fixture() {
    for (Request* r : c.abandoned) {
      MPI_Wait(&r->mpi, MPI_STATUS_IGNORE);
      delete r;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_free(&c.comm);
  }
};

}  // namespace

TEST_CASE("matching configs: the callbacks carry the agreement, then a comm or the no-device status", "[oob]") {
  Fixture f;
  const Created r = create(f.c, nccl_config());
  INFO(r.message);
  const bool gpus = BASP_HAVE_NCCL && cuda_devices() >= world_size();
  if (!BASP_HAVE_NCCL) {
    CHECK(r.status == BASP_ERROR_UNSUPPORTED);
    CHECK_THAT(r.message, Catch::Contains("without CUDA + NCCL"));
  } else if (cuda_devices() == 0) {
    CHECK(r.status == BASP_ERROR_CUDA);
    CHECK_THAT(r.message, Catch::Contains("the NCCL backend needs a CUDA device"));
  } else if (gpus) {
    REQUIRE(r.status == BASP_SUCCESS);
    basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
    CHECK(basp_comm_query(r.comm, -1, 0, &info) == BASP_SUCCESS);
    CHECK(info.world_size == world_size());
    CHECK(basp_comm_destroy(r.comm) == BASP_SUCCESS);
  }
  if (r.status != BASP_SUCCESS) CHECK(r.comm == nullptr);
  // The callbacks were used, each request freed. With NCCL: the agreement's rounds and the readiness round (or
  // more). Without: every rank failed its own checks alike, so the consistency check's first round is the only one.
  if (BASP_HAVE_NCCL) {
    CHECK(f.c.starts >= 3);
  } else {
    CHECK(f.c.starts == 1);
  }
  CHECK(f.c.frees == f.c.starts);
  for (int s : all_statuses(r.status)) CHECK(s == r.status);
}

TEST_CASE("a config that differs on one rank: a mismatch on every rank, naming the field", "[oob]") {
  if (world_size() < 2) return;
  Fixture f;
  basp_comm_config_t cfg = nccl_config();
  if (world_rank() == 1) cfg.num_groups = 1;  // the others: -1 (gcd rule)
  const Created r = create(f.c, cfg);
  INFO(r.message);
  // A build without NCCL: every rank's own UNSUPPORTED comes first, with the difference noted.
  const basp_status_t expected = BASP_HAVE_NCCL ? BASP_ERROR_MISMATCH : BASP_ERROR_UNSUPPORTED;
  CHECK(r.status == expected);
  CHECK_THAT(r.message, Catch::Contains("basp_comm_create_oob") && Catch::Contains("num_groups: rank ") &&
                            Catch::Contains("rank 1 = 1"));
  if (!BASP_HAVE_NCCL) CHECK_THAT(r.message, Catch::Contains("every rank of the call failed so; the calls differ"));
  CHECK(r.comm == nullptr);
  for (int s : all_statuses(r.status)) CHECK(s == expected);
}

TEST_CASE("a config bad on one rank only: named there, a mismatch everywhere else, at once", "[oob]") {
  if (world_size() < 2) return;
  Fixture f;
  basp_comm_config_t cfg = nccl_config();
  if (world_rank() == 0) cfg.micro_batch = -3;
  const Created r = create(f.c, cfg);
  INFO(r.message);
  // A build without NCCL: the other ranks' own checks fail too (UNSUPPORTED), and that is what they report.
  if (world_rank() == 0) {
    CHECK(r.status == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(r.message,
               Catch::Contains("config->micro_batch (-3) must be positive") &&
                   Catch::Contains(BASP_HAVE_NCCL ? "the other ranks of the call fail with BASP_ERROR_MISMATCH"
                                                  : "the other ranks of the call fail too"));
  } else {
    CHECK(r.status == (BASP_HAVE_NCCL ? BASP_ERROR_MISMATCH : BASP_ERROR_UNSUPPORTED));
    CHECK_THAT(r.message, Catch::Contains("argument checks: rank 0 = failed with BASP_ERROR_INVALID_ARGUMENT"));
  }
  CHECK(r.ms < 5000);  // not the 20 s timeout
  CHECK(r.comm == nullptr);
}

TEST_CASE("a backend the out-of-band entry cannot make: named on every rank alike", "[oob]") {
  Fixture f;
  basp_comm_config_t cfg = nccl_config();
  cfg.backend = BASP_BACKEND_MPI;
  const Created r = create(f.c, cfg);
  INFO(r.message);
  CHECK(r.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Catch::Contains("config->backend (0) is not BASP_BACKEND_NCCL"));
  CHECK(r.ms < 5000);
  for (int s : all_statuses(r.status)) CHECK(s == BASP_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("a start that fails: BASP_ERROR_OOB where it failed, a timeout where it did not", "[oob]") {
  SECTION("on every rank") {
    Fixture f;
    f.c.fail_start = true;
    const Created r = create(f.c, nccl_config());
    INFO(r.message);
    CHECK(r.status == BASP_ERROR_OOB);
    CHECK_THAT(r.message, Catch::Contains("oob->allgather_start returned 7") &&
                              Catch::Contains("the consistency check of basp_comm_create_oob"));
    CHECK(f.c.frees == 0);  // nothing was started
    for (int s : all_statuses(r.status)) CHECK(s == BASP_ERROR_OOB);
  }
  SECTION("on one rank") {
    if (world_size() < 2) return;
    Fixture f;
    f.c.fail_start = world_rank() == 0;
    basp_comm_config_t cfg = nccl_config();
    cfg.timeout_ms = 400;
    const Created r = create(f.c, cfg);
    INFO(r.message);
    if (world_rank() == 0) {
      CHECK(r.status == BASP_ERROR_OOB);
      CHECK(r.ms < 300);
    } else {
      // Its peers' all-gather cannot complete without rank 0: they time out, as documented.
      CHECK(r.status == BASP_ERROR_TIMEOUT);
      CHECK_THAT(r.message, Catch::Contains("oob->allgather_test never completed"));
      CHECK(r.ms >= 395);
    }
    // Rank 0 never joined the others' abandoned all-gather (the 8-byte fingerprints): it does now that they gave up
    // (an earlier join would have completed it for them), so that the Fixture can finish it. Non-blocking, as
    // theirs: a blocking collective does not match a non-blocking one.
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
      std::vector<unsigned char> dummy(8), all(8 * static_cast<size_t>(world_size()));
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Iallgather(dummy.data(), 8, MPI_BYTE, all.data(), 8, MPI_BYTE, f.c.comm, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
  }
}

TEST_CASE("a test that never completes: BASP_ERROR_TIMEOUT on every rank after the timeout", "[oob]") {
  Fixture f;
  f.c.never_done = true;
  basp_comm_config_t cfg = nccl_config();
  cfg.timeout_ms = 500;
  const Created r = create(f.c, cfg);
  INFO(r.message);
  CHECK(r.status == BASP_ERROR_TIMEOUT);
  CHECK_THAT(r.message, Catch::Contains("timed out after") &&
                            Catch::Contains("the consistency check of basp_comm_create_oob") &&
                            Catch::Contains("the out-of-band group"));
  CHECK(r.ms >= 495);
  CHECK(r.ms < 5000);
  CHECK(f.c.frees == 1);  // the abandoned request was released
  for (int s : all_statuses(r.status)) CHECK(s == BASP_ERROR_TIMEOUT);
}

TEST_CASE("a bad channel is named at once, on the rank that has it", "[oob]") {
  // Every rank passes the same bad channel, so nobody waits for anybody.
  Fixture f;
  const basp_comm_config_t cfg = nccl_config();
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  CHECK(basp_comm_create_oob(nullptr, &cfg, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("oob is NULL"));
  CHECK(comm == nullptr);
  basp_oob_t o = make_oob(f.c);
  o.magic = 0x1234;
  CHECK(basp_comm_create_oob(&o, &cfg, &comm) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("oob->magic"));
  o = make_oob(f.c);
  o.allgather_test = nullptr;
  CHECK(basp_comm_create_oob(&o, &cfg, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("oob->allgather_test is NULL"));
  o = make_oob(f.c);
  o.rank = o.num_ranks;
  CHECK(basp_comm_create_oob(&o, &cfg, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("oob->rank (" + std::to_string(o.num_ranks) + ") is outside 0.."));
  o = make_oob(f.c);
  o.num_ranks = 0;
  CHECK(basp_comm_create_oob(&o, &cfg, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("oob->num_ranks (0)"));
  // A bad channel and a bad argument: the argument is named (it is the caller's to fix first).
  o = make_oob(f.c);
  o.allgather_start = nullptr;
  CHECK(basp_comm_create_oob(&o, nullptr, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("config is NULL"));
  CHECK(comm == nullptr);
  CHECK(f.c.starts == 0);  // none of these reached the callbacks
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
