// One test per error path of the C ABI: the documented status, a message naming the argument (and value), and
// nothing created. Runs under mpirun with 2 ranks so that group size K = 2 (B = 1) makes divisibility matter.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"

namespace {

using basp::test::world_size;

basp_comm_config_t config(int64_t b) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = b;
  return c;
}

basp_plan_desc_t qkv(int64_t s, int64_t hq, int64_t hkv) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP16;
  d.seq_len = s;
  d.head_dim = 4;
  d.num_tensors = 3;
  d.num_heads[0] = hq;
  d.num_heads[1] = hkv;
  d.num_heads[2] = hkv;
  return d;
}

std::string last() { return basp_last_error(); }

struct World {
  basp_comm_t comm = nullptr;
  World() {
    const basp_comm_config_t c = config(1);  // one group of N
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  }
  ~World() { basp_comm_destroy(comm); }
};

}  // namespace

TEST_CASE("status strings and version", "[capi]") {
  CHECK(std::string(basp_status_string(BASP_SUCCESS)) == "BASP_SUCCESS");
  CHECK(std::string(basp_status_string(BASP_ERROR_INVALID_HANDLE)) == "BASP_ERROR_INVALID_HANDLE");
  CHECK(std::string(basp_status_string(static_cast<basp_status_t>(999))) == "unknown status");
  for (int s = 0; s < BASP_STATUS_COUNT; ++s)
    CHECK(std::string(basp_status_string(static_cast<basp_status_t>(s))) != "unknown status");
  int major = -1, minor = -1, patch = -1;
  REQUIRE(basp_get_version(&major, &minor, &patch) == BASP_SUCCESS);
  CHECK(major == BASP_VERSION_MAJOR);
  CHECK(minor == BASP_VERSION_MINOR);
  CHECK(patch == BASP_VERSION_PATCH);
  CHECK(basp_get_version(nullptr, nullptr, nullptr) == BASP_SUCCESS);
  CHECK(basp_dtype_size(BASP_DTYPE_BF16) == 2);
  CHECK(basp_dtype_size(static_cast<basp_dtype_t>(77)) == 0);
}

TEST_CASE("features and the NCCL library the build runs with", "[capi]") {
  unsigned features = 0xffffffffu;
  REQUIRE(basp_get_features(&features) == BASP_SUCCESS);
  CHECK(((features & BASP_FEATURE_MPI) != 0) == (BASP_HAVE_MPI != 0));
  CHECK(((features & BASP_FEATURE_CUDA) != 0) == (BASP_HAVE_CUDA != 0));
  CHECK(((features & BASP_FEATURE_NCCL) != 0) == (BASP_HAVE_NCCL != 0));
  CHECK(((features & BASP_FEATURE_HWLOC) != 0) == (BASP_HAVE_HWLOC != 0));
  CHECK((features & ~15u) == 0u);
  CHECK(basp_get_features(nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("features is NULL") != std::string::npos);

  int version = -1;
  char path[4096];
  std::memset(path, 'x', sizeof path);
  const basp_status_t st = basp_get_nccl_library(&version, path, sizeof path);
  if (BASP_HAVE_NCCL) {
    REQUIRE(st == BASP_SUCCESS);
    CHECK(version >= 20000);  // 2.x.y as major * 10000 + minor * 100 + patch
    const std::string file(path);
    CHECK(file.find("libnccl") != std::string::npos);
    // Cut to fit, and always terminated.
    char small[4];
    REQUIRE(basp_get_nccl_library(nullptr, small, sizeof small) == BASP_SUCCESS);
    CHECK(std::string(small) == file.substr(0, 3));
    CHECK(basp_get_nccl_library(nullptr, path, 0) == BASP_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(basp_last_error()).find("path_capacity is 0") != std::string::npos);
    CHECK(basp_get_nccl_library(nullptr, nullptr, 0) == BASP_SUCCESS);
  } else {
    CHECK(st == BASP_ERROR_UNSUPPORTED);
    CHECK(version == -1);
  }
}

TEST_CASE("comm creation: bad arguments are named and create nothing", "[capi]") {
  const basp_mpi_fint_t world = MPI_Comm_c2f(MPI_COMM_WORLD);
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  basp_comm_config_t c = config(2);

  CHECK(basp_comm_create_mpi(world, &c, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("comm"));
  CHECK(basp_comm_create_mpi(world, nullptr, &comm) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("config is NULL"));
  CHECK(comm == nullptr);

  c = config(0);
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("micro_batch (0)"));
  c = config(-3);
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("micro_batch (-3)"));
  c = config(2);
  c.num_groups = 0;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("num_groups (0)"));
  c = config(2);
  c.num_groups = 3;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("num_groups (3)"));
  c = config(2);
  c.backend = 42;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("backend (42)"));
  c = config(2);
  c.placement = -1;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("placement (-1)"));
  c = config(2);
  c.reserved0 = 5;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("reserved0 (5)"));

  c = config(2);
  c.magic = 0xdeadbeef;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("config->magic"));
  c = config(2);
  c.size = 3;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("config->size (3)"));
  // The first layout ended before timeout_ms: a caller built against it is served; anything shorter is not.
  const size_t first_layout = offsetof(basp_comm_config_v1, timeout_ms);
  c = config(2);
  c.size = first_layout - 8;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("config->size (" + std::to_string(first_layout - 8) + ")") &&
                         Catch::Contains("first layout (" + std::to_string(first_layout) + " bytes"));
  c = config(2);
  c.size = first_layout;
  c.timeout_ms = -77;  // beyond the caller's struct: never read
  REQUIRE(basp_comm_create_mpi(world, &c, &comm) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  c = config(2);
  c.timeout_ms = -2;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("config->timeout_ms (-2)"));
  c = config(2);
  c.version = 9;
  CHECK(basp_comm_create_mpi(world, &c, &comm) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("config->version (9)"));

  c = config(2);
  CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_NULL), &c, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("parent"));
  CHECK(comm == nullptr);
  // A larger struct from a newer caller is accepted (the library reads the part it knows).
  struct Bigger {
    basp_comm_config_v1 v1;
    int64_t future_field;
  } big = {config(2), 7};
  big.v1.size = sizeof(Bigger);
  REQUIRE(basp_comm_create_mpi(world, &big.v1, &comm) == BASP_SUCCESS);
  CHECK(last().empty());
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

TEST_CASE("the last error is per thread: one thread's message never shows on another", "[capi]") {
  const basp_comm_config_t bad = config(-5);
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &bad, &comm) == BASP_ERROR_INVALID_ARGUMENT);
  const std::string mine = last();
  REQUIRE_THAT(mine, Catch::Contains("micro_batch (-5)"));
  std::string seen_before, seen_after;
  std::thread other([&] {
    seen_before = basp_last_error();  // nothing failed on this thread yet
    basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
    basp_comm_query(nullptr, -1, 0, &info);  // fails here: this thread's own message
    seen_after = basp_last_error();
  });
  other.join();
  CHECK(seen_before.empty());
  CHECK_THAT(seen_after, Catch::Contains("basp_comm_query: comm is NULL"));
  CHECK(last() == mine);  // the other thread's failure did not replace this one's
  CHECK(basp_dtype_size(BASP_DTYPE_FP32) == 4);
  CHECK(last() == mine);  // a call that sets no status leaves it
  CHECK(basp_get_version(nullptr, nullptr, nullptr) == BASP_SUCCESS);
  CHECK(last().empty());  // a successful call clears it, on this thread only
}

// basp_plan_info_t grew in 0.2: a caller built against an older header passes its smaller size and gets exactly the
// fields it knows; nothing past its size is written.
TEST_CASE("plan info: older, smaller structs are served, and nothing past their size is written", "[capi]") {
  const int n = world_size();
  World w;
  const basp_plan_desc_t d = qkv(8 * n, 2 * n, n);
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  const size_t v01 = offsetof(basp_plan_info_v1, layout);       // 0.1: up to reserved0
  const size_t first = offsetof(basp_plan_info_v1, last_path);  // the first release: before last_path
  const size_t v02 = offsetof(basp_plan_info_v1, split_begin);  // 0.2: up to reserved1
  for (size_t size : {first, v01, v02}) {
    basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
    std::memset(&info, 0xab, sizeof(info));
    info.size = size;
    info.magic = BASP_PLAN_INFO_MAGIC;
    info.version = BASP_PLAN_INFO_VERSION;
    REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
    CHECK(info.num_tensors == 3);
    CHECK(info.group_size == n);
    CHECK(info.seq_sharded_elems[0] == 8 * 2 * n * 4);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&info);
    bool untouched = true;
    for (size_t i = size; i < sizeof(info); ++i) untouched = untouched && bytes[i] == 0xab;
    CHECK(untouched);
  }
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  info.size = first - 8;
  CHECK(basp_plan_query(plan, &info) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("info->size"));
  info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  CHECK(info.ndim == 4);
  CHECK(info.layout == BASP_LAYOUT_BSHD);
  CHECK(info.seq_sharded_shape[0][2] == 2 * n);
  CHECK(info.head_sharded_shape[1][1] == 8 * n);
  CHECK(info.plan_path != BASP_PATH_NONE);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

// `desc` as a caller built against an older, smaller struct (basp_plan_desc_t, basp_batch_problem_t) passes it: its
// first `size` bytes, that size, and garbage where its struct ends.
template <typename T>
static T older_caller(const T& desc, size_t size) {
  T d;
  std::memset(&d, 0xab, sizeof(d));
  std::memcpy(&d, &desc, size);
  d.size = size;
  return d;
}

// basp_plan_desc_t grew in 0.3 (query_heads, token_capacity): a caller built against the first layout passes its
// size and gets a query-like plan; the bytes past its size are never read.
TEST_CASE("plan desc: the first, smaller layout is served with defaults", "[capi]") {
  const int n = world_size();
  World w;
  const size_t first = offsetof(basp_plan_desc_v1, query_heads);
  REQUIRE(first == 112);
  basp_plan_desc_t d = older_caller(qkv(8 * n, 2 * n, n), first);
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  CHECK(info.token_capacity == 0);
  CHECK(info.replicated == 0);
  CHECK(info.split_end[1] - info.split_begin[1] == 1);  // the KV tensor follows its own split: n heads over n
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  d.size = first - 8;
  plan = reinterpret_cast<basp_plan_t>(0x1);
  CHECK(basp_plan_create(w.comm, &d, &plan) == BASP_ERROR_BAD_STRUCT);
  CHECK(plan == nullptr);
}

// basp_plan_desc_t grew again (head_dims): a caller built against the layout through token_capacity passes its size
// and gets head_dim for every tensor, whatever lies past its struct.
TEST_CASE("plan desc: the layout before head_dims is served with head_dim for every tensor", "[capi]") {
  const int n = world_size();
  World w;
  const size_t before = offsetof(basp_plan_desc_v1, head_dims);
  REQUIRE(before == 184);
  const basp_plan_desc_t d = older_caller(qkv(8 * n, 2 * n, n), before);
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  for (int t = 0; t < 3; ++t) CHECK(info.head_sharded_shape[t][3] == 4);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

// Tensors of different head sizes in one plan: each tensor's shapes in the plan info, head_dim unset when every
// tensor sets its own, and the bad sizes named with nothing created.
TEST_CASE("plan creation: per-tensor head sizes", "[capi]") {
  const int n = world_size();
  World w;
  basp_plan_desc_t d = qkv(8 * n, 2 * n, 2 * n);  // head_dim 4
  d.num_tensors = 4;
  d.num_heads[3] = 1;  // a rotary key of its own, following the query split
  d.query_heads[3] = 2 * n;
  d.head_dims[0] = 6;
  d.head_dims[2] = 3;
  d.head_dims[3] = 1;
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  const int64_t dims[] = {6, 4, 3, 1};
  for (int t = 0; t < 4; ++t) {
    INFO("tensor " << t);
    CHECK(info.seq_sharded_shape[t][3] == dims[t]);
    CHECK(info.head_sharded_shape[t][3] == dims[t]);
  }
  CHECK(info.seq_sharded_elems[0] == 8 * 2 * n * 6);
  CHECK(info.seq_sharded_elems[2] == 8 * 2 * n * 3);
  CHECK(info.head_sharded_elems[3] == 8 * n * 1);
  CHECK(info.replicated == (n > 1 ? 1 : 0));
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  basp_plan_desc_t own = d;
  own.head_dim = -1;
  own.head_dims[1] = 4;
  REQUIRE(basp_plan_create(w.comm, &own, &plan) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);

  struct Case {
    const char* message;
    void (*edit)(basp_plan_desc_t&);
  };
  const Case cases[] = {
      {"head_dims[2] (-3) must be positive", [](basp_plan_desc_t& x) { x.head_dims[2] = -3; }},
      {"head_dims[6] (8) must be 0: only 4 tensors", [](basp_plan_desc_t& x) { x.head_dims[6] = 8; }},
      {"head_dim (-1) must be positive: head_dims[1] is 0", [](basp_plan_desc_t& x) { x.head_dim = -1; }},
      {"overflows",
       [](basp_plan_desc_t& x) {
         x.head_dims[2] = int64_t{1} << 40;
         x.seq_len = int64_t{1} << 40;
       }},
  };
  for (const Case& c : cases) {
    basp_plan_desc_t bad = d;
    c.edit(bad);
    plan = reinterpret_cast<basp_plan_t>(0x1);
    INFO(c.message);
    CHECK(basp_plan_create(w.comm, &bad, &plan) == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains(c.message));
    CHECK(plan == nullptr);
  }
}

namespace {

// basp_comm_partition_batch's answer on a comm of batch plans only: the predicted seconds and the groups' sizes.
struct Partition {
  basp_status_t status = BASP_ERROR_INTERNAL;
  double seconds = -1;
  std::vector<int32_t> sizes;
};

Partition partition(basp_comm_t comm, const basp_batch_problem_t& p) {
  const auto n = static_cast<size_t>(world_size());
  Partition out;
  std::vector<int32_t> sizes(n), ranks(n), group_docs(n), docs(static_cast<size_t>(p.num_docs > 0 ? p.num_docs : 1));
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  out.status =
      basp_comm_partition_batch(comm, &p, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &b, &out.seconds);
  if (out.status == BASP_SUCCESS) out.sizes.assign(sizes.begin(), sizes.begin() + b.num_groups);
  return out;
}

}  // namespace

// basp_batch_problem_t gained v_head_dim (v's and the output's head size, 0 = head_dim): the planner's time
// follows it, a caller built before it passes the older size and gets head_dim whatever lies past its struct, and
// bad values are named.
TEST_CASE("batch problem: v_head_dim, and the layout before it", "[capi]") {
  const int n = world_size();
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 0;
  c.batch_capacity = 1024;
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  // Attention alone: every plan's time is the model's times (D + Dv) / (2 D).
  basp_cost_model_t model = BASP_COST_MODEL_INITIALIZER;
  model.c2 = 1e-9;
  model.c1 = 1e-7;
  REQUIRE(basp_comm_set_cost_model(comm, &model) == BASP_SUCCESS);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 2 * n + 1; ++i) lengths.push_back(9 + (i * 13) % 41);
  basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
  CHECK(p.v_head_dim == 0);
  p.num_docs = static_cast<int32_t>(lengths.size());
  p.lengths = lengths.data();
  p.dtype = BASP_DTYPE_BF16;
  p.query_heads = p.kv_heads = 16;
  p.head_dim = 192;
  const Partition plain = partition(comm, p);
  REQUIRE(plain.status == BASP_SUCCESS);
  CHECK(plain.seconds > 0);
  p.v_head_dim = 192;
  const Partition same = partition(comm, p);
  CHECK(same.seconds == plain.seconds);
  CHECK(same.sizes == plain.sizes);
  p.v_head_dim = 128;
  const Partition mla = partition(comm, p);
  REQUIRE(mla.status == BASP_SUCCESS);
  CHECK(mla.seconds == Approx(plain.seconds * (192.0 + 128.0) / (2 * 192.0)).epsilon(1e-12));

  // The layout through capacity: 64 bytes on LP64, v_head_dim read as 0 (garbage past the struct ignored).
  const size_t before = offsetof(basp_batch_problem_v1, v_head_dim);
  REQUIRE(before == 64);
  const basp_batch_problem_t old = older_caller(p, before);
  const Partition got = partition(comm, old);
  REQUIRE(got.status == BASP_SUCCESS);
  CHECK(got.seconds == plain.seconds);
  CHECK(got.sizes == plain.sizes);
  basp_batch_problem_t shorter = old;
  shorter.size = before - 8;
  CHECK(partition(comm, shorter).status == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("problem->size (56)"));

  p.v_head_dim = -4;
  CHECK(partition(comm, p).status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("v_head_dim (-4)"));
  p.v_head_dim = int64_t{1} << 62;
  CHECK(partition(comm, p).status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("bytes per token") && Catch::Contains("v_head_dim 4611686018427387904"));
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
}

// basp_cost_model_t grew in 0.6 (per_piece): a caller built against the layout through reserved0 passes its size;
// get writes it that many bytes, set reads per_piece as 0; the bytes past its size are neither read nor written.
TEST_CASE("cost model: per_piece, and the layout before it", "[capi]") {
  World w;
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  CHECK(m.per_piece == 0.0);
  REQUIRE(basp_comm_get_cost_model(w.comm, &m) == BASP_SUCCESS);
  CHECK(m.per_piece == 0.0);  // a new comm's model: no per-piece term
  m.per_piece = 3.25e-8;
  REQUIRE(basp_comm_set_cost_model(w.comm, &m) == BASP_SUCCESS);
  basp_cost_model_t back = BASP_COST_MODEL_INITIALIZER;
  back.per_piece = -9.0;  // poison
  REQUIRE(basp_comm_get_cost_model(w.comm, &back) == BASP_SUCCESS);
  CHECK(back.per_piece == 3.25e-8);
  CHECK(back.a0 == m.a0);

  const size_t before = offsetof(basp_cost_model_v1, per_piece);
  REQUIRE(before == 72);
  // get into the older struct: its fields, nothing past them (the poison stays).
  const basp_cost_model_t fresh = BASP_COST_MODEL_INITIALIZER;
  basp_cost_model_t old = older_caller(fresh, before);
  const basp_cost_model_t poisoned = old;
  REQUIRE(basp_comm_get_cost_model(w.comm, &old) == BASP_SUCCESS);
  CHECK(old.a0 == m.a0);
  CHECK(old.beta_node == m.beta_node);
  CHECK(std::memcmp(&old.per_piece, &poisoned.per_piece, sizeof old.per_piece) == 0);
  // set from the older struct (garbage past it): the rest as given, per_piece the comm's own (the caller does not
  // know it, so its get -> change -> set keeps a calibrated term).
  old.a1 = 4.5e-6;
  REQUIRE(basp_comm_set_cost_model(w.comm, &old) == BASP_SUCCESS);
  REQUIRE(basp_comm_get_cost_model(w.comm, &back) == BASP_SUCCESS);
  CHECK(back.per_piece == 3.25e-8);
  CHECK(back.a1 == 4.5e-6);
  basp_cost_model_t shorter = old;
  shorter.size = before - 8;
  CHECK(basp_comm_set_cost_model(w.comm, &shorter) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("model->size (64)"));
  CHECK(basp_comm_get_cost_model(w.comm, &shorter) == BASP_ERROR_BAD_STRUCT);

  // A bad per_piece is refused naming it, the model unchanged.
  back.per_piece = -1e-9;
  CHECK(basp_comm_set_cost_model(w.comm, &back) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("model->per_piece (-1e-09)"));
  back.per_piece = std::numeric_limits<double>::quiet_NaN();
  CHECK(basp_comm_set_cost_model(w.comm, &back) == BASP_ERROR_INVALID_ARGUMENT);
  REQUIRE(basp_comm_get_cost_model(w.comm, &back) == BASP_SUCCESS);
  CHECK(back.per_piece == 3.25e-8);
}

TEST_CASE("basp_split follows tensor_split", "[capi]") {
  int64_t b = -1, e = -1;
  const int64_t begins[] = {0, 3, 6, 8, 10};  // 10 over 4: 3, 3, 2, 2
  for (int32_t j = 0; j < 4; ++j) {
    REQUIRE(basp_split(10, 4, j, &b, &e) == BASP_SUCCESS);
    CHECK(b == begins[j]);
    CHECK(e == begins[j + 1]);
  }
  REQUIRE(basp_split(2, 4, 3, &b, nullptr) == BASP_SUCCESS);  // fewer items than parts: the last get none
  CHECK(b == 2);
  CHECK(basp_split(10, 0, 0, &b, &e) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("parts (0)"));
  CHECK(basp_split(10, 4, 4, &b, &e) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("index (4)"));
  CHECK(basp_split(-1, 4, 0, &b, &e) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("items (-1)"));
}

// A THD plan needs the token count of each call; a BSHD plan takes -1 or its seq_len only.
TEST_CASE("token counts: THD needs one, BSHD takes its own", "[capi]") {
  const int n = world_size();
  World w;
  basp_plan_desc_t d = qkv(8 * n, 2 * n, n);
  basp_plan_t plan = nullptr;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  std::vector<uint8_t> a(1 << 16), b(1 << 16);
  const void* in[3] = {a.data(), a.data() + 20000, a.data() + 40000};
  void* out[3] = {b.data(), b.data() + 20000, b.data() + 40000};
  CHECK(basp_scatter_tokens(plan, 8 * n + 1, in, out, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("must be -1 or the plan's seq_len"));
  CHECK(basp_scatter_tokens(plan, -1, in, out, nullptr) == BASP_SUCCESS);
  CHECK(basp_scatter_tokens(plan, 8 * n, in, out, nullptr) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  d.layout = BASP_LAYOUT_THD;
  d.seq_len = -1;
  d.token_capacity = 100;
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  CHECK(basp_scatter(plan, in, out, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("a THD plan takes the token count of each call"));
  CHECK(basp_gather_tokens(plan, 101, in, out, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("num_tokens (101) is outside 0..token_capacity (100)"));
  CHECK(basp_scatter_tokens(plan, 77, in, out, nullptr) == BASP_SUCCESS);
  // Document boundaries: checked when set, and each execute's T against their last entry.
  const int64_t cu[4] = {0, 30, 30, 77};
  REQUIRE(basp_plan_set_documents(plan, cu, 3) == BASP_SUCCESS);
  CHECK(basp_scatter_tokens(plan, 77, in, out, nullptr) == BASP_SUCCESS);
  CHECK(basp_scatter_tokens(plan, 76, in, out, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("num_tokens (76) is not the stream's length in the document boundaries set (77)"));
  const int64_t bad_first[2] = {1, 5};
  CHECK(basp_plan_set_documents(plan, bad_first, 1) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("cu_seqlens[0] (1) must be 0"));
  const int64_t decreasing[3] = {0, 9, 4};
  CHECK(basp_plan_set_documents(plan, decreasing, 2) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("cu_seqlens[2] (4) is less than cu_seqlens[1] (9)"));
  const int64_t too_long[2] = {0, 101};
  CHECK(basp_plan_set_documents(plan, too_long, 1) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("exceeds the plan's token_capacity (100)"));
  CHECK(basp_plan_set_documents(plan, nullptr, 2) == BASP_ERROR_NULL_POINTER);
  CHECK(basp_scatter_tokens(plan, 77, in, out, nullptr) == BASP_SUCCESS);  // the failed calls changed nothing
  REQUIRE(basp_plan_set_documents(plan, nullptr, 0) == BASP_SUCCESS);      // forgotten
  CHECK(basp_scatter_tokens(plan, 50, in, out, nullptr) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  d = qkv(8 * n, 2 * n, n);
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  CHECK(basp_plan_set_documents(plan, cu, 3) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("is not BASP_LAYOUT_THD"));
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

TEST_CASE("bad handles are rejected without being dereferenced", "[capi]") {
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  CHECK(basp_comm_query(nullptr, -1, 0, &info) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("comm is NULL"));
  auto bogus = reinterpret_cast<basp_comm_t>(&info);
  CHECK(basp_comm_query(bogus, -1, 0, &info) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("not a live basp_comm_t"));
  CHECK(basp_comm_destroy(bogus) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_plan_destroy(reinterpret_cast<basp_plan_t>(&info)) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_comm_destroy(nullptr) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(nullptr) == BASP_SUCCESS);

  World w;
  basp_plan_t plan = nullptr;
  const basp_plan_desc_t d = qkv(8 * world_size(), 2 * world_size(), world_size());
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  // A plan is not a comm and the other way round.
  CHECK(basp_comm_query(reinterpret_cast<basp_comm_t>(plan), -1, 0, &info) == BASP_ERROR_INVALID_HANDLE);
  basp_plan_info_t pinfo = BASP_PLAN_INFO_INITIALIZER;
  CHECK(basp_plan_query(reinterpret_cast<basp_plan_t>(w.comm), &pinfo) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("not a live basp_plan_t"));
  // Destroyed handles.
  REQUIRE(basp_plan_destroy(plan) == BASP_SUCCESS);
  CHECK(basp_plan_query(plan, &pinfo) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_plan_destroy(plan) == BASP_ERROR_INVALID_HANDLE);
  CHECK_THAT(last(), Catch::Contains("plan"));
}

TEST_CASE("query: arguments checked", "[capi]") {
  World w;
  const int n = world_size();
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  REQUIRE(basp_comm_query(w.comm, -1, 4 * n, &info) == BASP_SUCCESS);
  CHECK(info.world_size == n);
  CHECK(info.group_size == n);
  CHECK(info.token_end - info.token_begin == 4);
  CHECK(basp_comm_query(w.comm, n, 4 * n, &info) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("rank (" + std::to_string(n) + ")"));
  CHECK(basp_comm_query(w.comm, -1, -5, &info) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("seq_len (-5)"));
  CHECK(basp_comm_query(w.comm, -1, 4, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("info is NULL"));
  basp_rank_info_t bad = BASP_RANK_INFO_INITIALIZER;
  bad.magic = 1;
  CHECK(basp_comm_query(w.comm, -1, 4, &bad) == BASP_ERROR_BAD_STRUCT);
  CHECK_THAT(last(), Catch::Contains("info->magic"));
  // Any length is split as tensor_split does: 4n + 1 tokens over n positions, the first one holds one more.
  REQUIRE(basp_comm_query(w.comm, -1, 4 * n + 1, &info) == BASP_SUCCESS);
  const int32_t l = info.group_position;
  CHECK(info.token_begin == 4 * l + (l > 0 ? 1 : 0));
  CHECK(info.token_end == 4 * (l + 1) + 1);
  std::vector<int32_t> ranks(static_cast<size_t>(n), -1);
  REQUIRE(basp_comm_group_ranks(w.comm, 0, ranks.data(), n) == BASP_SUCCESS);
  for (int i = 0; i < n; ++i) CHECK(ranks[i] == i);
  CHECK(basp_comm_group_ranks(w.comm, 1, ranks.data(), n) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("group_index (1)"));
  CHECK(basp_comm_group_ranks(w.comm, 0, nullptr, n) == BASP_ERROR_NULL_POINTER);
  CHECK(basp_comm_group_ranks(w.comm, 0, ranks.data(), n - 1) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("capacity (" + std::to_string(n - 1) + ")"));
}

TEST_CASE("plan creation: bad descriptors are named and create nothing", "[capi]") {
  World w;
  const int n = world_size();
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(0x1);
  basp_plan_desc_t d = qkv(8 * n, 2 * n, n);
  CHECK(basp_plan_create(w.comm, &d, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK(basp_plan_create(w.comm, nullptr, &plan) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("desc is NULL"));
  CHECK(plan == nullptr);
  CHECK(basp_plan_create(nullptr, &d, &plan) == BASP_ERROR_INVALID_HANDLE);

  struct Case {
    const char* message;
    void (*edit)(basp_plan_desc_t&);
    basp_status_t status;
  };
  const Case cases[] = {
      {"seq_len (0)", [](basp_plan_desc_t& x) { x.seq_len = 0; }, BASP_ERROR_INVALID_ARGUMENT},
      {"seq_len (-8)", [](basp_plan_desc_t& x) { x.seq_len = -8; }, BASP_ERROR_INVALID_ARGUMENT},
      {"head_dim (0)", [](basp_plan_desc_t& x) { x.head_dim = 0; }, BASP_ERROR_INVALID_ARGUMENT},
      {"head_dim (-1)", [](basp_plan_desc_t& x) { x.head_dim = -1; }, BASP_ERROR_INVALID_ARGUMENT},
      {"num_heads[1] (0)", [](basp_plan_desc_t& x) { x.num_heads[1] = 0; }, BASP_ERROR_INVALID_ARGUMENT},
      {"num_heads[2] (-4)", [](basp_plan_desc_t& x) { x.num_heads[2] = -4; }, BASP_ERROR_INVALID_ARGUMENT},
      {"num_tensors (0)", [](basp_plan_desc_t& x) { x.num_tensors = 0; }, BASP_ERROR_INVALID_ARGUMENT},
      {"num_tensors (9)", [](basp_plan_desc_t& x) { x.num_tensors = 9; }, BASP_ERROR_INVALID_ARGUMENT},
      {"layout (5)", [](basp_plan_desc_t& x) { x.layout = 5; }, BASP_ERROR_INVALID_ARGUMENT},
      {"dtype (", [](basp_plan_desc_t& x) { x.dtype = BASP_DTYPE_COUNT; }, BASP_ERROR_INVALID_ARGUMENT},
      {"reserved0 (1)", [](basp_plan_desc_t& x) { x.reserved0 = 1; }, BASP_ERROR_INVALID_ARGUMENT},
      {"desc->magic", [](basp_plan_desc_t& x) { x.magic = 0; }, BASP_ERROR_BAD_STRUCT},
      {"desc->size (0)", [](basp_plan_desc_t& x) { x.size = 0; }, BASP_ERROR_BAD_STRUCT},
      {"desc->version (0)", [](basp_plan_desc_t& x) { x.version = 0; }, BASP_ERROR_BAD_STRUCT},
  };
  for (const Case& c : cases) {
    basp_plan_desc_t bad = d;
    c.edit(bad);
    plan = reinterpret_cast<basp_plan_t>(0x1);
    INFO(c.message);
    CHECK(basp_plan_create(w.comm, &bad, &plan) == c.status);
    CHECK_THAT(last(), Catch::Contains(c.message));
    CHECK(plan == nullptr);
  }
  // Shapes the group size does not divide are accepted (tensor_split); what stays refused is a KV tensor whose
  // head count does not divide the query heads it serves, and fields the layout does not use.
  const Case shape_cases[] = {
      {"num_heads[1] (3) does not divide its query head count (16)",
       [](basp_plan_desc_t& x) {
         x.num_heads[0] = 16;
         x.num_heads[1] = 3;
         x.query_heads[1] = 16;
       },
       BASP_ERROR_INVALID_ARGUMENT},
      {"query_heads[2] (-2)", [](basp_plan_desc_t& x) { x.query_heads[2] = -2; }, BASP_ERROR_INVALID_ARGUMENT},
      {"token_capacity (64) must be 0", [](basp_plan_desc_t& x) { x.token_capacity = 64; },
       BASP_ERROR_INVALID_ARGUMENT},
      {"token_capacity (0) must be positive", [](basp_plan_desc_t& x) { x.layout = BASP_LAYOUT_THD; },
       BASP_ERROR_INVALID_ARGUMENT},
  };
  for (const Case& c : shape_cases) {
    basp_plan_desc_t bad = d;
    c.edit(bad);
    plan = reinterpret_cast<basp_plan_t>(0x1);
    INFO(c.message);
    CHECK(basp_plan_create(w.comm, &bad, &plan) == c.status);
    CHECK_THAT(last(), Catch::Contains(c.message));
    CHECK(plan == nullptr);
  }
  basp_plan_desc_t uneven = qkv(8 * n + 1, 2 * n + 1, n);
  REQUIRE(basp_plan_create(w.comm, &uneven, &plan) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

// BASP_MPI_TRANSPORT is read by every rank at plan creation (K > 1): a value that is not a path, on any rank, or
// two different forced paths in one group, fail on every rank with the variable named, and create nothing.
TEST_CASE("plan creation: a bad BASP_MPI_TRANSPORT is named on every rank", "[capi]") {
  const int n = world_size();
  if (n < 2) return;  // K = 1 takes no MPI path and reads no variable
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* before = std::getenv("BASP_MPI_TRANSPORT");
  const std::string saved = before ? before : "";
  World w;
  const basp_plan_desc_t d = qkv(8 * n, 2 * n, n);
  auto attempt = [&](const char* value) {
    setenv("BASP_MPI_TRANSPORT", value, 1);
    basp_plan_t plan = reinterpret_cast<basp_plan_t>(0x1);
    const basp_status_t st = basp_plan_create(w.comm, &d, &plan);
    CHECK(plan == nullptr);
    return st;
  };
  // Rank 0 alone sets a value that is no path.
  CHECK(attempt(rank == 0 ? "fastest" : "auto") == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(),
             Catch::Contains(rank == 0 ? "BASP_MPI_TRANSPORT (fastest) must be auto, p2p, cma, staged or direct"
                                       : "BASP_MPI_TRANSPORT is not auto, p2p, cma, staged or direct on another rank"));
  // Two forced paths that differ, under either name of the cma path.
  for (const char* cma : {"cma", "direct"}) {
    CHECK(attempt(rank == 0 ? cma : "staged") == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains("BASP_MPI_TRANSPORT is cma (or direct) on some ranks"));
  }
  // The comm is still usable, and each forced path is the one taken.
  const struct {
    const char* value;
    int32_t path;
  } forced[] = {
      {"p2p", BASP_PATH_P2P}, {"cma", BASP_PATH_CMA}, {"direct", BASP_PATH_DIRECT}, {"staged", BASP_PATH_STAGED}};
  for (const auto& f : forced) {
    setenv("BASP_MPI_TRANSPORT", f.value, 1);
    basp_plan_t plan = nullptr;
    REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
    basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
    REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
    // One group of n, one sequence: 8 tokens per rank; Q has 2n heads, K and V n heads, D = 4, 2-byte elements.
    const auto bytes = static_cast<size_t>(8 * (2 * n) * 4 * 2);
    std::vector<unsigned char> q(bytes, 1), k(bytes / 2, 2), v(bytes / 2, 3), qo(bytes), ko(bytes / 2), vo(bytes / 2);
    const void* in[3] = {q.data(), k.data(), v.data()};
    void* out[3] = {qo.data(), ko.data(), vo.data()};
    CHECK(basp_scatter(plan, in, out, nullptr) == BASP_SUCCESS);
    REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
    CHECK(info.last_path == f.path);
    CHECK(info.plan_path == f.path);
    CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
  }
  if (before) {
    setenv("BASP_MPI_TRANSPORT", saved.c_str(), 1);
  } else {
    unsetenv("BASP_MPI_TRANSPORT");
  }
}

TEST_CASE("execute: bad buffers are named and move nothing", "[capi]") {
  World w;
  const int n = world_size();
  basp_plan_t plan = nullptr;
  const basp_plan_desc_t d = qkv(4 * n, n, n);
  REQUIRE(basp_plan_create(w.comm, &d, &plan) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  const size_t bytes = static_cast<size_t>(info.seq_sharded_elems[0]) * 2;
  std::vector<char> a(bytes, 1), b(bytes, 2), c(bytes, 3), x(bytes, 4), y(bytes, 5), z(bytes, 6);
  const void* in[3] = {a.data(), b.data(), c.data()};
  void* out[3] = {x.data(), y.data(), z.data()};
  CHECK(basp_scatter(nullptr, in, out, nullptr) == BASP_ERROR_INVALID_HANDLE);
  CHECK(basp_scatter(plan, nullptr, out, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("inputs is NULL"));
  CHECK(basp_gather(plan, in, nullptr, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("outputs is NULL"));
  void* out_null[3] = {x.data(), nullptr, z.data()};
  CHECK(basp_scatter(plan, in, out_null, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("outputs[1] is NULL"));
  const void* in_null[3] = {a.data(), b.data(), nullptr};
  CHECK(basp_gather(plan, in_null, out, nullptr) == BASP_ERROR_NULL_POINTER);
  CHECK_THAT(last(), Catch::Contains("inputs[2] is NULL"));
  int fake_stream = 0;
  CHECK(basp_scatter(plan, in, out, &fake_stream) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("stream"));
  void* out_alias[3] = {x.data(), const_cast<void*>(in[1]), z.data()};
  CHECK(basp_scatter(plan, in, out_alias, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("outputs[1]") && Catch::Contains("overlaps inputs[1]"));
  void* out_twice[3] = {x.data(), x.data() + 1, z.data()};
  CHECK(basp_scatter(plan, in, out_twice, nullptr) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last(), Catch::Contains("overlaps outputs"));
  // Nothing moved.
  CHECK(x == std::vector<char>(bytes, 4));
  CHECK(y == std::vector<char>(bytes, 5));
  // And a good call after the bad ones works and clears the message.
  CHECK(basp_scatter(plan, in, out, nullptr) == BASP_SUCCESS);
  CHECK(last().empty());
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

TEST_CASE("destroy order: a plan outlives its comm handle", "[capi]") {
  const int n = world_size();
  basp_comm_t comm = nullptr;
  const basp_comm_config_t c = config(1);
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  basp_plan_t plan = nullptr;
  const basp_plan_desc_t d = qkv(2 * n, n, n);
  REQUIRE(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  REQUIRE(basp_plan_query(plan, &info) == BASP_SUCCESS);
  const size_t bytes = static_cast<size_t>(info.seq_sharded_elems[0]) * 2;
  std::vector<char> a(bytes, 1), b(bytes, 2), x(bytes), y(bytes), z(bytes), a2(bytes), b2(bytes), c2(bytes);
  const void* in[3] = {a.data(), b.data(), b.data()};
  void* out[3] = {x.data(), y.data(), z.data()};
  CHECK(basp_scatter(plan, in, out, nullptr) == BASP_SUCCESS);
  const void* in2[3] = {x.data(), y.data(), z.data()};
  void* back[3] = {a2.data(), b2.data(), c2.data()};
  CHECK(basp_gather(plan, in2, back, nullptr) == BASP_SUCCESS);
  CHECK(a2 == a);
  CHECK(b2 == b);
  CHECK(basp_plan_destroy(plan) == BASP_SUCCESS);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
