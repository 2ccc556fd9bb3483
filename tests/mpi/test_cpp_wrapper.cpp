// The header-only C++ wrapper (include/basp/basp.hpp) over every entry point of the C ABI, under mpirun: RAII
// comms and plans, exceptions carrying the status, the plan's shapes, shared memory, the async-error query and
// abort, and the NCCL and out-of-band constructors (on the CPU: their documented errors; make_oob's callbacks turn
// a C++ exception into BASP_ERROR_OOB instead of letting it cross the C ABI).
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <algorithm>

#include <basp/basp.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch_mpi_session.h"
#include "exchange_check.h"
#include "mpi_world.h"

namespace {

using basp::test::world_rank;
using basp::test::world_size;

basp_status_t status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const basp::Error& e) {
    return e.status();
  }
  return BASP_SUCCESS;
}

// make_oob's interface over MPI, on a private duplicate of the world.
struct MpiAllgather {
  MPI_Comm comm = MPI_COMM_NULL;
  bool throw_in_start = false;
  MpiAllgather() { MPI_Comm_dup(MPI_COMM_WORLD, &comm); }
  ~MpiAllgather() { MPI_Comm_free(&comm); }
  void* start(const void* send, void* recv, size_t bytes) {
    if (throw_in_start) throw std::runtime_error("no network today");
    auto* r = new MPI_Request(MPI_REQUEST_NULL);
    MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm, r);
    return r;
  }
  bool test(void* request) {
    int done = 0;
    MPI_Test(static_cast<MPI_Request*>(request), &done, MPI_STATUS_IGNORE);
    return done != 0;
  }
  void free(void* request) {
    auto* r = static_cast<MPI_Request*>(request);
    MPI_Wait(r, MPI_STATUS_IGNORE);
    delete r;
  }
};

}  // namespace

TEST_CASE("C++: comm, plan, shapes and a bit-exact round trip", "[cpp]") {
  const int n = world_size();
  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  REQUIRE(comm);
  const basp::RankInfo me = comm.query(4 * n);
  CHECK(me.group_size == n);
  CHECK(comm.group_ranks(0).size() == static_cast<size_t>(n));

  const basp_plan_desc_t raw = basp::test::byte_bshd_desc(4 * n, 8, 2, n);
  basp::PlanDesc d;
  static_cast<basp_plan_desc_v1&>(d) = raw;
  basp::Plan plan(comm, d);
  const basp::PlanInfo info = plan.info();
  CHECK(info.ndim == 4);
  CHECK(info.seq_shape(0) == std::vector<int64_t>{1, 4, 2 * n, 8});
  CHECK(info.head_shape(0) == std::vector<int64_t>{1, 4 * n, 2, 8});
  CHECK(info.head_begin[1] == me.group_position);
  CHECK(info.head_end[1] == me.group_position + 1);

  basp::test::ExchangeBuffers x = basp::test::make_buffers(comm.get(), raw, 5);
  plan.scatter({x.seq[0].data(), x.seq[1].data()}, {x.head[0].data(), x.head[1].data()});
  CHECK(basp::test::head_output_exact(comm.get(), raw, 5, x));
  plan.gather({x.head[0].data(), x.head[1].data()}, {x.back[0].data(), x.back[1].data()});
  CHECK(x.back == x.seq);
  CHECK(status_of([&] { plan.scatter({x.seq[0].data()}, {x.head[0].data()}); }) == BASP_ERROR_INVALID_ARGUMENT);

  // A plan moved from keeps working under its new owner.
  basp::Plan moved = std::move(plan);
  CHECK_FALSE(plan);
  moved.scatter({x.seq[0].data(), x.seq[1].data()}, {x.head[0].data(), x.head[1].data()});
}

TEST_CASE("C++: shared memory, the async-error query and abort", "[cpp]") {
  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  void* p = comm.mem_alloc(4096);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 4096);  // zeroed, writable host memory
  comm.mem_free(p);
  CHECK_FALSE(comm.async_error().has_value());
  CHECK(status_of([&] { comm.abort(); }) == BASP_ERROR_UNSUPPORTED);  // MPI comms time out by themselves
  CHECK(status_of([&] { comm.mem_alloc(0); }) == BASP_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("C++: the NCCL and out-of-band constructors", "[cpp]") {
  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  cfg.backend = BASP_BACKEND_NCCL;
  cfg.timeout_ms = 20000;
  CHECK(status_of([&] { basp::Comm::from_nccl(nullptr, cfg); }) == BASP_ERROR_NULL_POINTER);

  MpiAllgather channel;
  const basp_status_t made = status_of([&] {
    basp::Comm c = basp::Comm::from_oob(basp::make_oob(channel, world_rank(), world_size()), cfg);
    CHECK(c.query().world_size == world_size());
  });
  // Without NCCL, or without a GPU per rank, the documented statuses; with them, a comm.
  CHECK((made == BASP_SUCCESS || made == BASP_ERROR_CUDA || made == BASP_ERROR_UNSUPPORTED));
  if (!BASP_HAVE_NCCL) CHECK(made == BASP_ERROR_UNSUPPORTED);

  // An exception in a callback is an error code across the C ABI: BASP_ERROR_OOB on every rank.
  channel.throw_in_start = true;
  CHECK(status_of([&] { basp::Comm::from_oob(basp::make_oob(channel, world_rank(), world_size()), cfg); }) ==
        BASP_ERROR_OOB);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}

// The 0.3 entry points: tensor_split ranges, a THD plan executed with the token count of each call, and the
// documents of a packed batch assigned to groups.
TEST_CASE("C++: split, THD with per-call token counts, document assignment", "[cpp]") {
  const int n = world_size();
  CHECK(basp::split(10, 4, 1) == std::pair<int64_t, int64_t>{3, 6});
  CHECK(status_of([] { basp::split(10, 4, 4); }) == BASP_ERROR_INVALID_ARGUMENT);

  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  // Three documents over one group: one stream of 9 tokens.
  const basp::Comm::Documents docs = comm.assign_documents({4, 2, 3}, 16);
  CHECK(docs.assignment.num_docs == 3);
  CHECK(docs.assignment.stream_tokens == 9);
  CHECK(docs.docs == std::vector<int32_t>{0, 1, 2});
  CHECK(docs.cu_seqlens == std::vector<int64_t>{0, 4, 6, 9});
  const auto mine = basp::split(9, n, docs.assignment.group_position);
  CHECK(docs.assignment.token_begin == mine.first);
  CHECK(docs.assignment.token_end == mine.second);

  basp::PlanDesc desc;
  desc.layout = BASP_LAYOUT_THD;
  desc.dtype = BASP_DTYPE_BYTE;
  desc.token_capacity = 16;
  desc.head_dim = 2;
  desc.num_tensors = 1;
  desc.num_heads[0] = n;  // one head per rank
  basp::Plan plan(comm, desc);
  const int64_t T = docs.assignment.stream_tokens;
  const int64_t mine_tokens = mine.second - mine.first;
  std::vector<uint8_t> in(static_cast<size_t>(mine_tokens * n * 2)), out(static_cast<size_t>(T * 2), 0xA5);
  for (int64_t s = 0; s < mine_tokens; ++s)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t d = 0; d < 2; ++d)
        in[static_cast<size_t>((s * n + h) * 2 + d)] = static_cast<uint8_t>((mine.first + s) * 16 + h * 2 + d);
  const void* ip[1] = {in.data()};
  void* op[1] = {out.data()};
  plan.set_documents(docs.cu_seqlens);
  CHECK(status_of([&] { plan.scatter(T - 1, ip, op); }) == BASP_ERROR_INVALID_ARGUMENT);  // not the stream's T
  plan.scatter(T, ip, op);
  const int32_t me = docs.assignment.group_position;
  for (int64_t s = 0; s < T; ++s)
    for (int64_t d = 0; d < 2; ++d)
      CHECK(out[static_cast<size_t>(s * 2 + d)] == static_cast<uint8_t>(s * 16 + me * 2 + d));
  std::vector<uint8_t> back(in.size(), 0xA5);
  const void* hp[1] = {out.data()};
  void* bp[1] = {back.data()};
  plan.gather(T, hp, bp);
  CHECK(back == in);
  CHECK(status_of([&] { plan.scatter(ip, op); }) == BASP_ERROR_INVALID_ARGUMENT);  // THD needs its T
}

TEST_CASE("C++: batch plans, the planner and the cost model", "[cpp]") {
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  basp::CommConfig config;
  config.micro_batch = 0;  // batch plans only
  config.batch_capacity = 64;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), config);
  basp::CostModel model = comm.cost_model();
  model.c2 = 1e-9;
  model.c1 = 1e-8;
  comm.set_cost_model(model);
  CHECK(comm.cost_model().c2 == 1e-9);
  // The model's text goes back in unchanged.
  const std::string text = comm.export_cost_model();
  CHECK(text.rfind("basp-cost-model 1", 0) == 0);
  comm.import_cost_model(text);
  CHECK(comm.cost_model().c1 == 1e-8);
  CHECK(status_of([&] { comm.import_cost_model("basp-cost-model 1\na0 oops\n"); }) == BASP_ERROR_INVALID_ARGUMENT);
  // A planned batch of documents, exchanged: one head per rank, byte elements, value = stream token.
  std::vector<int64_t> lengths;
  for (int i = 0; i < 2 * n + 1; ++i) lengths.push_back(3 + (i * 7) % 11);
  const basp::Batch batch = comm.partition_batch(lengths, n, 1, 2, BASP_DTYPE_BYTE);
  CHECK(batch.num_groups() >= 1);
  basp::PlanDesc desc;
  desc.layout = BASP_LAYOUT_THD;
  desc.dtype = BASP_DTYPE_BYTE;
  desc.head_dim = 2;
  desc.num_tensors = 1;
  desc.num_heads[0] = n;
  basp::Plan plan(comm, desc, batch);
  const basp::PlanInfo info = plan.info();
  // This rank's group and stream from the batch itself.
  int64_t tokens = 0;
  size_t at = 0, doc_at = 0;
  int32_t k = 0;
  for (int32_t g = 0; g < batch.num_groups(); ++g) {
    const auto begin = batch.ranks.begin() + static_cast<long>(at);
    const bool mine = std::find(begin, begin + batch.group_sizes[g], rank) != begin + batch.group_sizes[g];
    int64_t t = 0;
    for (int32_t i = 0; i < batch.group_docs[g]; ++i) t += lengths[static_cast<size_t>(batch.docs[doc_at + i])];
    if (mine) tokens = t, k = batch.group_sizes[g];
    at += static_cast<size_t>(batch.group_sizes[g]);
    doc_at += static_cast<size_t>(batch.group_docs[g]);
  }
  CHECK(info.group_size == k);
  const int64_t s_l = info.token_end - info.token_begin;
  const int64_t heads = info.head_end[0] - info.head_begin[0];
  std::vector<uint8_t> in(static_cast<size_t>(s_l * n * 2) + 1), out(static_cast<size_t>(tokens * heads * 2) + 1, 0xA5);
  for (int64_t s = 0; s < s_l; ++s)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t d = 0; d < 2; ++d)
        in[static_cast<size_t>((s * n + h) * 2 + d)] = static_cast<uint8_t>((info.token_begin + s) * 8 + h * 2 + d);
  const void* ip[1] = {in.data()};
  void* op[1] = {out.data()};
  plan.scatter(ip, op);
  for (int64_t s = 0; s < tokens; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < 2; ++d)
        CHECK(out[static_cast<size_t>((s * heads + h) * 2 + d)] ==
              static_cast<uint8_t>(s * 8 + (info.head_begin[0] + h) * 2 + d));
}

TEST_CASE("C and C++: the planner's deprecated names give its answer", "[cpp]") {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  basp::CommConfig config;
  config.micro_batch = 0;
  config.batch_capacity = 64;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), config);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 2 * n + 1; ++i) lengths.push_back(3 + (i * 5) % 13);
  const basp::Batch batch = comm.partition_batch(lengths, n, 1, 2, BASP_DTYPE_BYTE);
  CHECK(batch.num_groups() >= 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const basp::Batch old = comm.plan_batch(lengths, n, 1, 2, BASP_DTYPE_BYTE);
#pragma GCC diagnostic pop
  CHECK(old.group_sizes == batch.group_sizes);
  CHECK(old.ranks == batch.ranks);
  CHECK(old.group_docs == batch.group_docs);
  CHECK(old.docs == batch.docs);
  // The C symbols: the old one is the same function, and names itself in its errors.
  basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
  p.num_docs = static_cast<int32_t>(lengths.size());
  p.lengths = lengths.data();
  p.query_heads = n;
  p.kv_heads = 1;
  p.head_dim = 2;
  p.dtype = BASP_DTYPE_BYTE;
  std::vector<int32_t> sizes(static_cast<size_t>(n)), ranks(sizes), group_docs(sizes), docs(lengths.size());
  basp_batch_t out = BASP_BATCH_INITIALIZER;
  REQUIRE(basp_comm_plan_batch(comm.get(), &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &out,
                               nullptr) == BASP_SUCCESS);
  sizes.resize(static_cast<size_t>(out.num_groups));
  CHECK(sizes == batch.group_sizes);
  CHECK(docs == batch.docs);
  p.num_docs = 0;
  CHECK(basp_comm_plan_batch(comm.get(), &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &out,
                             nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("basp_comm_plan_batch") != std::string::npos);
  CHECK(basp_comm_partition_batch(comm.get(), &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &out,
                                  nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("basp_comm_partition_batch") != std::string::npos);
  p.num_docs = static_cast<int32_t>(lengths.size());
  p.capacity = -1;
  CHECK(basp_comm_partition_batch(comm.get(), &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &out,
                                  nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("problem->capacity (-1)") != std::string::npos);
}
