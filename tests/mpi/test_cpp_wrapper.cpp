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

  // Split-phase: two head chunks each way, waited for last first, equal the one-call exchange.
  const int32_t count = std::min(2, plan.max_head_chunks());
  const void* seq_in[] = {x.seq[0].data(), x.seq[1].data()};
  void* head_out[] = {x.head[0].data(), x.head[1].data()};
  const void* head_in[] = {x.head[0].data(), x.head[1].data()};
  void* back_out[] = {x.back[0].data(), x.back[1].data()};
  for (auto& h : x.head) std::fill(h.begin(), h.end(), uint8_t{0xA5});
  for (int32_t c = 0; c < count; ++c) plan.scatter_start(c, count, seq_in, head_out);
  for (int32_t c = count - 1; c >= 0; --c) plan.scatter_wait(c);
  CHECK(basp::test::head_output_exact(comm.get(), raw, 5, x));
  for (auto& b : x.back) std::fill(b.begin(), b.end(), uint8_t{0xA5});
  for (int32_t c = 0; c < count; ++c) plan.gather_start(c, count, head_in, back_out);
  while (!plan.gather_test(count - 1)) {
  }
  for (int32_t c = count - 1; c >= 0; --c) plan.gather_wait(c);
  CHECK(x.back == x.seq);
  CHECK(status_of([&] { plan.scatter_wait(0); }) == BASP_ERROR_INVALID_ARGUMENT);  // not started

  // A plan moved from keeps working under its new owner.
  basp::Plan moved = std::move(plan);
  CHECK_FALSE(plan);
  moved.scatter({x.seq[0].data(), x.seq[1].data()}, {x.head[0].data(), x.head[1].data()});
}

TEST_CASE("C++: the head chunk choice, beyond the wrapper's first array", "[cpp]") {
  const int n = world_size();
  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  basp::PlanDesc d;
  static_cast<basp_plan_desc_v1&>(d) = basp::test::byte_bshd_desc(64 * n, 2, 1, 1);
  d.num_heads[0] = 300 * n;  // 300 chunks at most: more than the wrapper's first array holds
  basp::Plan plan(comm, d);
  const double attention = 0.001;
  const basp::Plan::HeadChunkChoice c = plan.choose_head_chunks(attention);
  // The C call with room for every entry gives the same answer.
  std::vector<double> want(400, -1.0);
  basp_head_chunk_choice_t raw = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  REQUIRE(basp_choose_head_chunks(plan.get(), nullptr, -1, attention, 0, &raw, want.data(), 400) == BASP_SUCCESS);
  CHECK(raw.max_head_chunks == 300);
  want.resize(300);
  CHECK(c.max_head_chunks == 300);
  CHECK(c.num_chunks == raw.num_chunks);
  CHECK(c.attention_seconds == attention);
  CHECK(c.predicted_seconds == want);
  // Collective over the group, the same plan named as the gather: the same answer.
  const basp::Plan::HeadChunkChoice same = plan.choose_head_chunks(attention, &plan, -1, true);
  CHECK(same.predicted_seconds == want);
  CHECK(status_of([&] { plan.choose_head_chunks(-1.0); }) == BASP_ERROR_INVALID_ARGUMENT);
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
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
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

namespace {

// An element of tensor t at global (token s, head h, element e) of the one sequence: distinct integers, exact in
// FP64 (and K times one of them, the summing gather's answer for a head every rank holds).
double mla_value(int32_t t, int64_t s, int64_t h, int64_t e) {
  return static_cast<double>(((t * 4096 + s) * 64 + h) * 256 + e + 1);
}

// One MLA exchange of a group of all n ranks (BSHD, one sequence of seq_len tokens, FP64), written out here: tensor
// t has heads[t] heads of dims[t] elements; a tensor of one head serving the query heads (rope) is held by every
// rank, the others' heads split evenly. The scatter must write exactly the rank's heads of every token into
// poisoned outputs, and the gather give the input back (the rope head summed over the n ranks holding it).
void check_mla_exchange(const basp::Comm& comm, const basp::PlanDesc& d, const std::vector<int64_t>& heads,
                        const std::vector<int64_t>& dims, int32_t rope) {
  const int64_t n = world_size(), pos = world_rank(), s_loc = d.seq_len / n;
  basp::Plan plan(comm, d);
  const auto tensors = static_cast<int32_t>(heads.size());
  std::vector<std::vector<double>> in(tensors), out(tensors), back(tensors);
  std::vector<const void*> ip, hp;
  std::vector<void*> op, bp;
  for (int32_t t = 0; t < tensors; ++t) {
    const int64_t h = heads[t], dim = dims[t], held = t == rope ? 1 : h / n;
    for (int64_t s = 0; s < s_loc; ++s)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t e = 0; e < dim; ++e) in[t].push_back(mla_value(t, pos * s_loc + s, hh, e));
    out[t].assign(static_cast<size_t>(d.seq_len * held * dim), -7777.0);
    back[t].assign(in[t].size(), -7777.0);
    ip.push_back(in[t].data());
    op.push_back(out[t].data());
    hp.push_back(out[t].data());
    bp.push_back(back[t].data());
  }
  plan.scatter(ip.data(), op.data());
  for (int32_t t = 0; t < tensors; ++t) {
    INFO("tensor " << t);
    const int64_t dim = dims[t], held = t == rope ? 1 : heads[t] / n, first = t == rope ? 0 : pos * held;
    size_t wrong = 0;
    for (int64_t s = 0; s < d.seq_len; ++s)
      for (int64_t hh = 0; hh < held; ++hh)
        for (int64_t e = 0; e < dim; ++e)
          wrong += out[t][static_cast<size_t>((s * held + hh) * dim + e)] != mla_value(t, s, first + hh, e);
    CHECK(wrong == 0);
  }
  plan.gather(hp.data(), bp.data());
  for (int32_t t = 0; t < tensors; ++t) {
    INFO("tensor " << t);
    std::vector<double> want = in[t];
    if (t == rope)
      for (double& v : want) v *= static_cast<double>(n);
    CHECK(back[t] == want);
  }
}

}  // namespace

// Multi-head latent attention: q and k of one head size and v of another in one plan (PlanDesc::mla), and the
// rotary key sent once per token as a head every rank receives (PlanDesc::mla_shared_rope); the planner told v's
// head size. One comm, one loop over the shapes.
TEST_CASE("C++: MLA plans of two head sizes and a shared rotary key, bit-exact", "[cpp]") {
  const int n = world_size();
  basp::CommConfig cfg;
  cfg.micro_batch = 1;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  const int64_t h = 2 * n, seq = 4 * n;
  for (const int64_t qk : {6, 5}) {
    const int64_t v = qk - 2;
    CAPTURE(qk, v);
    const basp::PlanDesc d = basp::PlanDesc::mla(BASP_LAYOUT_BSHD, BASP_DTYPE_FP64, seq, qk, v, h);
    CHECK(d.num_tensors == 3);
    CHECK((d.num_heads[0] == h && d.num_heads[1] == h && d.num_heads[2] == h));
    CHECK((d.head_dim == qk && d.head_dims[0] == 0 && d.head_dims[1] == 0 && d.head_dims[2] == v));
    check_mla_exchange(comm, d, {h, h, h}, {qk, qk, v}, -1);
    // q (nope + rope), k_nope, k_rope (one head), v.
    const basp::PlanDesc r = basp::PlanDesc::mla_shared_rope(BASP_LAYOUT_BSHD, BASP_DTYPE_FP64, seq, qk - 2, 2, v, h);
    CHECK(r.num_tensors == 4);
    CHECK((r.num_heads[0] == h && r.num_heads[1] == h && r.num_heads[2] == 1 && r.num_heads[3] == h));
    CHECK((r.head_dim == qk && r.head_dims[1] == qk - 2 && r.head_dims[2] == 2 && r.head_dims[3] == v));
    CHECK(r.query_heads[2] == h);
    check_mla_exchange(comm, r, {h, h, 1, h}, {qk, qk - 2, 2, v}, 2);
  }
  CHECK(status_of([&] { basp::PlanDesc::mla(BASP_LAYOUT_BSHD, BASP_DTYPE_FP64, seq, 6, 0, h); }) ==
        BASP_ERROR_INVALID_ARGUMENT);
  try {
    basp::PlanDesc::mla_shared_rope(BASP_LAYOUT_BSHD, BASP_DTYPE_FP64, seq, 4, -2, 4, h);
    FAIL("a negative rope_dim was taken");
  } catch (const basp::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("rope_dim (-2)") != std::string::npos);
  }

  // The planner with v's head size: attention alone costs, so every plan's time scales by (D + Dv) / (2 D), and
  // v_head_dim = head_dim answers as 0 does, bit for bit.
  basp::CommConfig bc;
  bc.micro_batch = 0;
  bc.batch_capacity = 256;
  basp::Comm batch_comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), bc);
  basp::CostModel model = batch_comm.cost_model();
  model.a0 = model.a1 = model.beta_node = model.beta_network = 0.0;
  model.c2 = 1e-9;
  model.c1 = 1e-7;
  batch_comm.set_cost_model(model);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 2 * n + 1; ++i) lengths.push_back(5 + (i * 11) % 37);
  const basp::Batch plain = batch_comm.partition_batch(lengths, h, h, 192, BASP_DTYPE_BF16);
  const basp::Batch same = batch_comm.partition_batch(lengths, h, h, 192, BASP_DTYPE_BF16, 0, 192);
  const basp::Batch mla = batch_comm.partition_batch(lengths, h, h, 192, BASP_DTYPE_BF16, 0, 128);
  CHECK(same.predicted_seconds == plain.predicted_seconds);
  CHECK(same.group_sizes == plain.group_sizes);
  CHECK(plain.predicted_seconds > 0);
  CHECK(mla.predicted_seconds == Approx(plain.predicted_seconds * (192.0 + 128.0) / 384.0).epsilon(1e-12));
  CHECK(status_of([&] { batch_comm.partition_batch(lengths, h, h, 192, BASP_DTYPE_BF16, 0, -1); }) ==
        BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("v_head_dim (-1)") != std::string::npos);
}
