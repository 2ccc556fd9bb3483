// The NCCL backend's CPU-visible behaviour through the C ABI, runnable on machines without a GPU (CI): asking for
// the NCCL backend without a device, or from a build without NCCL, fails on every rank with a clear status and
// creates nothing; basp_comm_create_nccl's argument errors; the async-error query and abort on MPI comms; the
// pointer-kind check of the MPI backend (host memory accepted with or without a driver; device memory rejected
// when a device exists). Under mpirun with 1 and 2 ranks.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"

#if BASP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using basp::test::cuda_devices;
using basp::test::world_size;

std::string last() { return basp_last_error(); }

basp_comm_config_t config(int32_t backend) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.backend = backend;
  return c;
}

}  // namespace

TEST_CASE("NCCL backend through basp_comm_create_mpi: a clear error on every rank when it cannot work", "[gpu]") {
  const basp_mpi_fint_t world = MPI_Comm_c2f(MPI_COMM_WORLD);
  const basp_comm_config_t c = config(BASP_BACKEND_NCCL);
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  const basp_status_t s = basp_comm_create_mpi(world, &c, &comm);
  if (!BASP_HAVE_NCCL) {
    CHECK(s == BASP_ERROR_UNSUPPORTED);
    CHECK_THAT(last(), Catch::Contains("BASP_BACKEND_NCCL") && Catch::Contains("without CUDA + NCCL"));
    CHECK(comm == nullptr);
  } else if (cuda_devices() == 0) {
    CHECK(s == BASP_ERROR_CUDA);
    CHECK_THAT(last(), Catch::Contains("the NCCL backend needs a CUDA device"));
    CHECK(comm == nullptr);
  } else if (cuda_devices() >= world_size()) {
    // One GPU per rank on this machine: the real thing.
    REQUIRE(s == BASP_SUCCESS);
    basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
    CHECK(basp_comm_query(comm, -1, 0, &info) == BASP_SUCCESS);
    CHECK(info.group_size == world_size());
    CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  } else {
    WARN("NCCL comm over MPI not tried: " << world_size() << " ranks, " << cuda_devices() << " GPUs");
    if (s == BASP_SUCCESS) basp_comm_destroy(comm);
  }
  INFO(last());
  // The world is still usable afterwards: no rank was left inside a collective.
  int one = 1, sum = 0;
  REQUIRE(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  CHECK(sum == world_size());
}

TEST_CASE("basp_comm_create_nccl: bad arguments are named and create nothing", "[gpu]") {
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  basp_comm_config_t c = config(BASP_BACKEND_NCCL);
  // A rank whose arguments are bad still takes part in the consistency check over its NCCL communicator, so with a
  // usable device every call below would ask `fake` for its rank: only without one (or without NCCL) does each
  // call fail before touching it. test_gpu_nccl_capi checks the same errors on a real communicator.
  if (BASP_HAVE_NCCL && cuda_devices() > 0) {
    WARN("skipped here: this process sees a CUDA device (test_gpu_nccl_capi covers these errors)");
    return;
  }
  int fake = 0;  // never dereferenced: every call below fails before touching it

  CHECK(basp_comm_create_nccl(&fake, &c, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("comm (the output handle) is NULL"));
  CHECK(basp_comm_create_nccl(&fake, nullptr, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("config is NULL"));
  CHECK(comm == nullptr);

  comm = reinterpret_cast<basp_comm_t>(0x1);
  CHECK(basp_comm_create_nccl(nullptr, &c, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("nccl_comm is NULL"));
  CHECK(comm == nullptr);

  c = config(BASP_BACKEND_MPI);
  CHECK(basp_comm_create_nccl(&fake, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("config->backend (0) is not BASP_BACKEND_NCCL"));

  c = config(BASP_BACKEND_NCCL);
  c.micro_batch = -3;
  CHECK(basp_comm_create_nccl(&fake, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("micro_batch (-3)"));

  c = config(BASP_BACKEND_NCCL);
  if (!BASP_HAVE_NCCL) {
    CHECK(basp_comm_create_nccl(&fake, &c, &comm) == BASP_ERROR_UNSUPPORTED);
    CHECK_THAT(last(), Catch::Contains("built without CUDA + NCCL"));
  } else if (cuda_devices() == 0) {
    // The device check comes before the communicator is touched.
    CHECK(basp_comm_create_nccl(&fake, &c, &comm) == BASP_ERROR_CUDA);
    CHECK_THAT(last(), Catch::Contains("the NCCL backend needs a CUDA device"));
  }
  CHECK(comm == nullptr);
}

TEST_CASE("async errors and abort on an MPI comm", "[gpu]") {
  const basp_comm_config_t c = config(BASP_BACKEND_MPI);
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);

  basp_status_t error = BASP_ERROR_INTERNAL;
  char message[64] = "unchanged";
  CHECK(basp_comm_get_async_error(comm, &error, message, sizeof(message)) == BASP_SUCCESS);
  CHECK(error == BASP_SUCCESS);
  CHECK(std::string(message).empty());
  error = BASP_ERROR_INTERNAL;
  CHECK(basp_comm_get_async_error(comm, &error, nullptr, 0) == BASP_SUCCESS);
  CHECK(error == BASP_SUCCESS);
  CHECK(basp_comm_get_async_error(comm, nullptr, message, sizeof(message)) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("error is NULL"));
  CHECK(basp_comm_get_async_error(nullptr, &error, message, sizeof(message)) == BASP_ERROR_INVALID_HANDLE);

  CHECK(basp_comm_abort(comm) == BASP_ERROR_UNSUPPORTED);
  CHECK_THAT(last(), Catch::Contains("only BASP_BACKEND_NCCL"));
  CHECK(basp_comm_abort(nullptr) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

TEST_CASE("MPI backend: host memory always accepted; device memory rejected when a device exists", "[gpu]") {
  const basp_comm_config_t c = config(BASP_BACKEND_MPI);
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 4 * world_size();
  d.head_dim = 3;
  d.num_tensors = 1;
  d.num_heads[0] = world_size();
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS);
  const size_t elems = static_cast<size_t>(4 * world_size() * 3);
  std::vector<float> in(elems, 1.5f), out(elems, 0.0f);
  const void* ins[1] = {in.data()};
  void* outs[1] = {out.data()};
  // Host memory is fine whether or not this machine has a driver (without one, CUDA's answer is "no driver").
  CHECK(basp_scatter(plan, ins, outs, nullptr) == BASP_SUCCESS);
  INFO(last());
  CHECK(out == in);  // every element of every rank is 1.5, so the head-sharded output is all 1.5 too

#if BASP_HAVE_CUDA
  if (cuda_devices() > 0) {
    void* device = nullptr;
    REQUIRE(cudaMalloc(&device, elems * sizeof(float)) == cudaSuccess);
    const void* dins[1] = {device};
    CHECK(basp_scatter(plan, dins, outs, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains("inputs[0]") && Catch::Contains("is device memory"));
    cudaFree(device);
  } else {
    WARN("device pointer on the MPI backend not tried: no CUDA device");
  }
#endif
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
