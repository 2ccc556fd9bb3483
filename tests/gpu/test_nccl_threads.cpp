// The NCCL backend across several GPUs of one machine, through the public C ABI, without MPI: one thread per
// GPU, each one rank of an NCCL communicator made by ncclCommInitAll, so every collective call of libbasp runs
// on all threads at once, as it would in N processes. Checked, with G = 1 (K = number of GPUs, up to 8):
//   1. scatter then gather of Q, K, V (GQA heads) through ncclAlltoAll, BSHD bf16 and SBHD fp32, bit-exact on
//      data that is a function of the global coordinates, outputs poisoned first;
//   2. a plan that differs on the last rank (num_heads[1]): BASP_ERROR_MISMATCH on every rank naming the field,
//      nothing created, and the comm still usable (a correct plan is created after it);
//   3. basp_comm_create_nccl with micro_batch differing on rank 0: BASP_ERROR_MISMATCH on every rank naming it,
//      no comm created.
// Needs at least two GPUs; reports skipped (77) otherwise (NCCL refuses two ranks of one process on one GPU).
//
// Built with BASP_TEST_PROCESSES=1 it is test_gpu_nccl_procs: one MPI process per rank, any number of ranks per GPU
// (under `mpirun -np N scripts/gpu/rank-env`, which gives every process its own NCCL_HOSTID), the same checks, and:
//   4. every creation route (basp_comm_create_nccl from the parent, basp_comm_create_mpi, basp_comm_create_oob over
//      MPI_Iallgather) with G = 1 and, where N is even and >= 4, G = 2, scatter and gather bit-exact;
//   5. a scatter + gather captured in a CUDA graph and replayed twice on new inputs, bit-exact;
//   6. BASP_CHECK_EXCHANGES=1: the last rank gathers while the others scatter: MISMATCH on every rank naming both
//      operations, nothing enqueued; the plan still works after;
//   7. a hung exchange: every rank but the last scatters, the last never joins; after the comm's timeout (3 s)
//      basp_comm_get_async_error reports BASP_ERROR_TIMEOUT, the comm is aborted, the stream completes (no hang),
//      and the next execute fails;
//   8. basp_comm_calibrate on a batch comm: completes, finite coefficients, the same on every rank;
//   9. split-phase head chunks (head_chunks_procs.h; NOT yet run on a GPU): GQA with a KV head every rank holds,
//      C in 1, 2, max started in order and waited in reverse, the scatter and the summing gather bit-exact; a plan
//      destroyed with chunks in flight that end.
// It reports skipped (77) when a rank has no CUDA device.
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "expected_tensors.h"
#include "gpu_threads.h"
#include "gpu_util.h"
#if BASP_TEST_PROCESSES
#include "head_chunks_procs.h"
#endif

using basp::layout::Geometry;
using basp::test::Barrier;
using basp::test::DeviceBytes;
using basp::test::Failures;
using basp::test::kPoison;

namespace {

constexpr uint64_t kSeed = 777;
constexpr int kMaxRanks = 8;

bool contains(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

basp_comm_config_t nccl_config(int64_t micro_batch) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = micro_batch;
  c.num_groups = 1;  // K = every GPU: the widest exchange
  c.backend = BASP_BACKEND_NCCL;
  c.timeout_ms = 60000;
  return c;
}

basp_plan_desc_t qkv_desc(int32_t layout, basp_dtype_t dtype, int64_t k) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = layout;
  d.dtype = dtype;
  d.seq_len = 3 * k;
  d.head_dim = 72;
  d.num_tensors = 3;
  d.num_heads[0] = 4 * k;
  d.num_heads[1] = 2 * k;
  d.num_heads[2] = 2 * k;
  return d;
}

// One plan's scatter and gather on rank l, checked against the global pattern: the comm's group (its size, this
// rank's position, its sequences; the pattern's seed differs per group, so every group moves its own data).
void exchange(basp_comm_t comm, int l, int32_t layout, basp_dtype_t dtype, int64_t elem, Failures& out,
              Barrier& barrier) {
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  basp_comm_query(comm, -1, 0, &me);
  const int64_t k = std::max<int32_t>(me.group_size, 1);
  const uint64_t seed = kSeed + 1000u * static_cast<uint64_t>(me.group_index);
  const std::string name = std::string(layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD") + " elem " + std::to_string(elem) +
                           " K " + std::to_string(k) + ": ";
  const basp_plan_desc_t desc = qkv_desc(layout, dtype, k);
  basp_plan_t plan = nullptr;
  if (basp_plan_create(comm, &desc, &plan) != BASP_SUCCESS) {
    out.check(false, l, name + "plan create: " + basp_last_error());
    barrier.wait();  // the two meeting points of the ranks that go on
    barrier.wait();
    return;
  }
  std::vector<Geometry> geoms;
  for (int t = 0; t < 3; ++t) {
    Geometry g;
    g.layout = layout;
    g.b_loc = me.num_sequences;
    g.seq_len = desc.seq_len;
    g.k = k;
    g.heads = desc.num_heads[t];
    g.split_heads = g.heads;
    g.head_dim = desc.head_dim;
    g.elem = elem;
    geoms.push_back(g);
  }
  const basp::test::ExchangeTensors x = basp::test::exchange_tensors(seed, geoms, me.group_position);
  const std::vector<DeviceBytes>& seq = x.seq;
  const std::vector<DeviceBytes>& head = x.head;
  const std::vector<DeviceBytes>& back = x.back;
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  barrier.wait();
  const void* in[3] = {seq[0].data(), seq[1].data(), seq[2].data()};
  void* mid[3] = {head[0].data(), head[1].data(), head[2].data()};
  const void* mid_in[3] = {head[0].data(), head[1].data(), head[2].data()};
  void* out_t[3] = {back[0].data(), back[1].data(), back[2].data()};
  const bool ran =
      basp_scatter(plan, in, mid, stream) == BASP_SUCCESS && basp_gather(plan, mid_in, out_t, stream) == BASP_SUCCESS;
  out.check(ran, l, name + "scatter/gather: " + (ran ? "" : basp_last_error()));
  TEST_CUDA(cudaStreamSynchronize(stream));
  TEST_CUDA(cudaStreamDestroy(stream));
  barrier.wait();
  if (ran) {
    for (int t = 0; t < 3; ++t) {
      const int64_t h = basp::test::first_difference(head[t].download(),
                                                     basp::test::head_expected(seed, geoms[t], t, me.group_position));
      out.check(h < 0, l, name + "scatter of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(h));
      const int64_t s = basp::test::first_difference(back[t].download(), seq[t].download());
      out.check(s < 0, l, name + "gather of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(s));
    }
  }
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  const basp_path_t want = k == 1 ? BASP_PATH_LOCAL : BASP_PATH_NCCL;
  out.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.last_path == want, l,
            name + "the exchange took the " + (k == 1 ? "local" : "NCCL") + " path");
  basp_plan_destroy(plan);
}

void rank_main(int l, int k, ncclComm_t parent, Failures& out, Barrier& barrier) {
  TEST_CUDA(cudaSetDevice(basp::test::device_of(l)));
  basp_comm_config_t config = nccl_config(2);
  basp_comm_t comm = nullptr;
  if (basp_comm_create_nccl(parent, &config, &comm) != BASP_SUCCESS) {
    out.check(false, l, std::string("comm create: ") + basp_last_error());
    return;
  }
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  out.check(basp_comm_query(comm, -1, 3 * k, &me) == BASP_SUCCESS && me.group_size == k && me.num_groups == 1, l,
            "one group of every rank");

  // 1. The exchange.
  exchange(comm, l, BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 2, out, barrier);
  exchange(comm, l, BASP_LAYOUT_SBHD, BASP_DTYPE_FP32, 4, out, barrier);

  // 2. A plan that differs on the last rank.
  basp_plan_desc_t desc = qkv_desc(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, k);
  if (l == k - 1) desc.num_heads[1] = 4 * k;
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(&config);
  const basp_status_t rc = basp_plan_create(comm, &desc, &plan);
  out.check(rc == BASP_ERROR_MISMATCH && contains(basp_last_error(), "num_heads[1]"), l,
            std::string("a differing plan: BASP_ERROR_MISMATCH naming num_heads[1], got ") + basp_status_string(rc) +
                ": " + basp_last_error());
  out.check(plan == nullptr, l, "no plan after a mismatch");
  exchange(comm, l, BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 2, out, barrier);  // the comm is still usable
  out.check(basp_comm_destroy(comm) == BASP_SUCCESS, l, "comm destroy");

  // 3. Comm creation that differs on rank 0.
  config = nccl_config(l == 0 ? 4 : 2);
  comm = reinterpret_cast<basp_comm_t>(&config);
  const basp_status_t crc = basp_comm_create_nccl(parent, &config, &comm);
  out.check(crc == BASP_ERROR_MISMATCH && contains(basp_last_error(), "micro_batch"), l,
            std::string("a differing comm: BASP_ERROR_MISMATCH naming micro_batch, got ") + basp_status_string(crc) +
                ": " + basp_last_error());
  out.check(comm == nullptr, l, "no comm after a mismatch");
}

}  // namespace

#if BASP_TEST_PROCESSES
// ---------------------------------------------------------------------------------------------------------------
// One process per rank: what only separate processes can run.

// The out-of-band channel of basp_comm_create_oob over MPI_COMM_WORLD.
int oob_start(void*, const void* send, void* recv, size_t bytes, void** request) {
  auto* r = new MPI_Request;
  if (MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD,
                     r) != MPI_SUCCESS) {
    delete r;
    return 1;
  }
  *request = r;
  return BASP_OOB_SUCCESS;
}
int oob_test(void*, void* request) {
  int done = 0;
  MPI_Test(static_cast<MPI_Request*>(request), &done, MPI_STATUS_IGNORE);
  return done ? BASP_OOB_SUCCESS : BASP_OOB_IN_PROGRESS;
}
int oob_free(void*, void* request) {
  delete static_cast<MPI_Request*>(request);
  return BASP_OOB_SUCCESS;
}

enum class Route { kSplit, kMpi, kOob };
const char* route_name(Route r) {
  return r == Route::kSplit ? "basp_comm_create_nccl"
         : r == Route::kMpi ? "basp_comm_create_mpi"
                            : "basp_comm_create_oob";
}

basp_status_t create(Route route, int l, int n, ncclComm_t parent, const basp_comm_config_t& config,
                     basp_comm_t* comm) {
  if (route == Route::kSplit) return basp_comm_create_nccl(parent, &config, comm);
  if (route == Route::kMpi) return basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &config, comm);
  basp_oob_t oob = BASP_OOB_INITIALIZER;
  oob.rank = l;
  oob.num_ranks = n;
  oob.allgather_start = &oob_start;
  oob.allgather_test = &oob_test;
  oob.allgather_free = &oob_free;
  return basp_comm_create_oob(&oob, &config, comm);
}

// 4. Every creation route, with G = 1 and (N even, >= 4) G = 2: the exchanges of part 1 bit-exact.
void routes(int l, int n, ncclComm_t parent, Failures& out, Barrier& barrier) {
  uint32_t features = 0;
  basp_get_features(&features);
  std::vector<int32_t> group_counts{1};
  if (n >= 4 && n % 2 == 0) group_counts.push_back(2);
  for (Route route : {Route::kSplit, Route::kMpi, Route::kOob}) {
    if (route == Route::kMpi && (features & BASP_FEATURE_MPI) == 0) {
      if (l == 0) std::printf("route %s: not run (libbasp built without MPI)\n", route_name(route));
      continue;
    }
    for (int32_t groups : group_counts) {
      const std::string name = std::string(route_name(route)) + ", G = " + std::to_string(groups) + ": ";
      basp_comm_config_t config = nccl_config(2 * groups);
      config.num_groups = groups;
      basp_comm_t comm = nullptr;
      const basp_status_t rc = create(route, l, n, parent, config, &comm);
      const bool made = barrier.all(rc == BASP_SUCCESS);
      out.check(made, l, name + "comm create: " + (rc == BASP_SUCCESS ? "ok on this rank" : basp_last_error()));
      if (!made) {
        if (comm != nullptr) basp_comm_destroy(comm);
        continue;
      }
      basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
      out.check(
          basp_comm_query(comm, -1, 0, &me) == BASP_SUCCESS && me.num_groups == groups && me.group_size == n / groups,
          l, name + "the groups");
      exchange(comm, l, BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 2, out, barrier);
      exchange(comm, l, BASP_LAYOUT_SBHD, BASP_DTYPE_FP32, 4, out, barrier);
      out.check(basp_comm_destroy(comm) == BASP_SUCCESS, l, name + "comm destroy");
      barrier.wait();
    }
  }
}

// A plan of the whole world (G = 1) with its tensors: BSHD bf16 Q, K, V.
struct WorldPlan {
  basp_plan_t plan = nullptr;
  std::vector<Geometry> geoms;
  basp::test::ExchangeTensors x;
  const void* in[3] = {};
  void* mid[3] = {};
  const void* mid_in[3] = {};
  void* back[3] = {};
};

bool make_world_plan(basp_comm_t comm, int l, int n, uint64_t seed, WorldPlan& w, Failures& out,
                     const std::string& name) {
  const basp_plan_desc_t desc = qkv_desc(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, n);
  const basp_status_t rc = basp_plan_create(comm, &desc, &w.plan);
  out.check(rc == BASP_SUCCESS, l, name + "plan create: " + (rc == BASP_SUCCESS ? "" : basp_last_error()));
  if (rc != BASP_SUCCESS) return false;
  for (int t = 0; t < 3; ++t) {
    Geometry g;
    g.layout = BASP_LAYOUT_BSHD;
    g.b_loc = 2;
    g.seq_len = desc.seq_len;
    g.k = n;
    g.heads = desc.num_heads[t];
    g.split_heads = g.heads;
    g.head_dim = desc.head_dim;
    g.elem = 2;
    w.geoms.push_back(g);
  }
  w.x = basp::test::exchange_tensors(seed, w.geoms, l);
  for (int t = 0; t < 3; ++t) {
    w.in[t] = w.x.seq[t].data();
    w.mid[t] = w.x.head[t].data();
    w.mid_in[t] = w.x.head[t].data();
    w.back[t] = w.x.back[t].data();
  }
  return true;
}

// Whether the scatter output and the gather output of `w` are exact for `seed`'s data.
bool exact(const WorldPlan& w, uint64_t seed, int l) {
  bool ok = true;
  for (int t = 0; t < 3; ++t) {
    ok = ok &&
         basp::test::first_difference(w.x.head[t].download(), basp::test::head_expected(seed, w.geoms[t], t, l)) < 0;
    ok = ok && basp::test::first_difference(w.x.back[t].download(), w.x.seq[t].download()) < 0;
  }
  return ok;
}

// Whether the scatter's and the gather's outputs of `w` hold nothing but the poison.
bool poisoned(const WorldPlan& w) {
  for (int t = 0; t < 3; ++t) {
    for (const DeviceBytes* b : {&w.x.head[t], &w.x.back[t]}) {
      const std::vector<std::byte> v = b->download();
      if (!std::all_of(v.begin(), v.end(), [](std::byte x) { return x == std::byte{kPoison}; })) return false;
    }
  }
  return true;
}

// 5. A multi-rank scatter + gather captured in a CUDA graph, replayed twice on new inputs.
void graph_replay(basp_comm_t comm, int l, int n, Failures& out, Barrier& barrier) {
  WorldPlan w;
  const bool made = barrier.all(make_world_plan(comm, l, n, kSeed + 1, w, out, "graph: "));
  if (!made) {
    if (w.plan != nullptr) basp_plan_destroy(w.plan);
    return;
  }
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const bool enqueued = basp_scatter(w.plan, w.in, w.mid, stream) == BASP_SUCCESS &&
                        basp_gather(w.plan, w.mid_in, w.back, stream) == BASP_SUCCESS;
  const std::string why = enqueued ? "" : basp_last_error();
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  out.check(enqueued && end == cudaSuccess && graph != nullptr, l, "graph: capture of scatter + gather: " + why);
  if (barrier.all(enqueued && end == cudaSuccess && graph != nullptr)) {
    cudaGraphExec_t exec = nullptr;
    TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (uint64_t replay = 0; replay < 2; ++replay) {
      const uint64_t seed = kSeed + 100 + replay;
      for (int t = 0; t < 3; ++t) {
        w.x.seq[t].upload(basp::test::seq_input(seed, w.geoms[t], t, l));
        w.x.head[t].fill(kPoison);
        w.x.back[t].fill(kPoison);
      }
      TEST_CUDA(cudaDeviceSynchronize());
      barrier.wait();
      TEST_CUDA(cudaGraphLaunch(exec, stream));
      TEST_CUDA(cudaStreamSynchronize(stream));
      barrier.wait();
      out.check(exact(w, seed, l), l, "graph: replay " + std::to_string(replay) + " bit-exact on new inputs");
    }
    cudaGraphExecDestroy(exec);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  TEST_CUDA(cudaStreamDestroy(stream));
  basp_plan_destroy(w.plan);
  barrier.wait();
}

// 6. BASP_CHECK_EXCHANGES=1 at plan creation: a gather against scatters is MISMATCH on every rank, naming both.
void exchange_check(basp_comm_t comm, int l, int n, Failures& out, Barrier& barrier) {
  setenv("BASP_CHECK_EXCHANGES", "1", 1);
  WorldPlan w;
  const bool made = barrier.all(make_world_plan(comm, l, n, kSeed + 2, w, out, "exchange check: "));
  unsetenv("BASP_CHECK_EXCHANGES");
  if (!made) {
    if (w.plan != nullptr) basp_plan_destroy(w.plan);
    return;
  }
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool gathers = l == n - 1;
  const basp_status_t rc =
      gathers ? basp_gather(w.plan, w.mid_in, w.back, stream) : basp_scatter(w.plan, w.in, w.mid, stream);
  const std::string message = basp_last_error();
  out.check(
      rc == BASP_ERROR_MISMATCH && contains(message.c_str(), "basp_scatter") &&
          contains(message.c_str(), "basp_gather") && contains(message.c_str(), "BASP_CHECK_EXCHANGES"),
      l,
      std::string("a gather against scatters: MISMATCH naming both, got ") + basp_status_string(rc) + ": " + message);
  TEST_CUDA(cudaStreamSynchronize(stream));
  barrier.wait();
  out.check(poisoned(w), l, "exchange check: the mismatched exchange wrote nothing (outputs still poisoned)");
  // The plan and the comm still work: an agreeing scatter and gather, bit-exact.
  const bool ran = basp_scatter(w.plan, w.in, w.mid, stream) == BASP_SUCCESS &&
                   basp_gather(w.plan, w.mid_in, w.back, stream) == BASP_SUCCESS;
  out.check(ran, l, std::string("exchange check: an agreeing exchange after it: ") + (ran ? "" : basp_last_error()));
  TEST_CUDA(cudaStreamSynchronize(stream));
  barrier.wait();
  out.check(ran && exact(w, kSeed + 2, l), l, "exchange check: the agreeing exchange is bit-exact");
  TEST_CUDA(cudaStreamDestroy(stream));
  basp_plan_destroy(w.plan);
  barrier.wait();
}

// 7. An exchange the last rank never joins: TIMEOUT from the next execute after the comm's timeout and from the
// async-error query, the comm aborted, the stream completed. Its own comm (a 3 s timeout) from `parent`.
void hung_exchange(ncclComm_t parent, int l, int n, Failures& out, Barrier& barrier) {
  constexpr int64_t kTimeoutMs = 3000;
  basp_comm_config_t config = nccl_config(2);
  config.timeout_ms = kTimeoutMs;
  basp_comm_t comm = nullptr;
  const basp_status_t rc = basp_comm_create_nccl(parent, &config, &comm);
  out.check(rc == BASP_SUCCESS, l, std::string("hung exchange: comm create: ") + (rc ? basp_last_error() : ""));
  WorldPlan w;
  const bool made = barrier.all(rc == BASP_SUCCESS && make_world_plan(comm, l, n, kSeed + 3, w, out, "hung: "));
  if (!made) {
    if (w.plan != nullptr) basp_plan_destroy(w.plan);
    if (comm != nullptr) basp_comm_destroy(comm);
    return;
  }
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool joins = l != n - 1;
  if (joins) {
    out.check(basp_scatter(w.plan, w.in, w.mid, stream) == BASP_SUCCESS, l, "hung: the scatter is enqueued");
    std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs + 1500));
    const basp_status_t next = basp_scatter(w.plan, w.in, w.mid, stream);
    const std::string message = basp_last_error();
    out.check(
        next == BASP_ERROR_TIMEOUT && contains(message.c_str(), "has not ended"), l,
        std::string("hung: the next execute is BASP_ERROR_TIMEOUT, got ") + basp_status_string(next) + ": " + message);
    basp_status_t async = BASP_SUCCESS;
    char text[512] = {};
    out.check(basp_comm_get_async_error(comm, &async, text, sizeof text) == BASP_SUCCESS && async == BASP_ERROR_TIMEOUT,
              l, std::string("hung: the async error is BASP_ERROR_TIMEOUT: ") + text);
    // The abort ended the hung kernels: the stream completes (polled, bounded).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    cudaError_t state = cudaErrorNotReady;
    while (state == cudaErrorNotReady && std::chrono::steady_clock::now() < end) {
      state = cudaStreamQuery(stream);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out.check(state != cudaErrorNotReady, l, "hung: the stream completed after the abort");
    cudaGetLastError();
    if (state == cudaErrorNotReady) {
      std::printf("FATAL: rank %d: the hung exchange did not end after the abort\n", l);
      std::fflush(stdout);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    // Never joins; its side of the communicator is given up too.
    out.check(basp_comm_abort(comm) == BASP_SUCCESS, l, "hung: the absent rank aborts its comm");
  }
  barrier.wait();
  TEST_CUDA(cudaStreamDestroy(stream));
  basp_plan_destroy(w.plan);
  basp_comm_destroy(comm);
  barrier.wait();
}

// 8. basp_comm_calibrate on NCCL: completes; finite, non-negative coefficients, the same bits on every rank.
void calibration(ncclComm_t parent, int l, Failures& out, Barrier& barrier) {
  basp_comm_config_t config = BASP_COMM_CONFIG_INITIALIZER;
  config.micro_batch = 0;
  config.batch_capacity = 4096;
  config.backend = BASP_BACKEND_NCCL;
  config.timeout_ms = 120000;
  basp_comm_t comm = nullptr;
  const basp_status_t rc = basp_comm_create_nccl(parent, &config, &comm);
  out.check(rc == BASP_SUCCESS, l, std::string("calibration: batch comm create: ") + (rc ? basp_last_error() : ""));
  if (!barrier.all(rc == BASP_SUCCESS)) {
    if (comm != nullptr) basp_comm_destroy(comm);
    return;
  }
  const basp_status_t cal = basp_comm_calibrate(comm, 64 * 1024, 2);
  out.check(cal == BASP_SUCCESS, l, std::string("calibration: basp_comm_calibrate: ") + (cal ? basp_last_error() : ""));
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  basp_comm_get_cost_model(comm, &m);
  const double mine[4] = {m.a0, m.a1, m.beta_node, m.beta_network};
  bool finite = m.calibrated == 1;
  for (double v : mine) finite = finite && std::isfinite(v) && v >= 0;
  out.check(cal != BASP_SUCCESS || finite, l, "calibration: finite coefficients >= 0, marked calibrated");
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<double> all(4 * static_cast<size_t>(n));
  MPI_Allgather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, MPI_COMM_WORLD);
  bool same = true;
  for (int r = 0; r < n; ++r) same = same && std::memcmp(&all[4 * static_cast<size_t>(r)], mine, sizeof mine) == 0;
  out.check(same, l, "calibration: the same coefficients on every rank");
  if (l == 0 && cal == BASP_SUCCESS) {
    std::printf("calibration: a0 %.3g s, a1 %.3g s, beta_node %.3g s/B, beta_network %.3g s/B\n", m.a0, m.a1,
                m.beta_node, m.beta_network);
  }
  basp_comm_destroy(comm);
  barrier.wait();
}

void procs_main(int l, int n, ncclComm_t parent, Failures& out, Barrier& barrier) {
  const auto section = [&](const char* what, auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    barrier.wait();
    if (l == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("section %s: %.1f s, %lld checks so far on rank 0\n", what, s, static_cast<long long>(out.checks));
      std::fflush(stdout);
    }
  };
  section("1-3 exchange and mismatches (basp_comm_create_nccl)", [&] { rank_main(l, n, parent, out, barrier); });
  section("4 creation routes", [&] { routes(l, n, parent, out, barrier); });
  const basp_comm_config_t config = nccl_config(2);
  basp_comm_t comm = nullptr;
  const basp_status_t rc = basp_comm_create_nccl(parent, &config, &comm);
  out.check(rc == BASP_SUCCESS, l, std::string("comm create: ") + (rc ? basp_last_error() : ""));
  if (barrier.all(rc == BASP_SUCCESS)) {
    section("5 graph capture and replay", [&] { graph_replay(comm, l, n, out, barrier); });
    section("6 BASP_CHECK_EXCHANGES", [&] { exchange_check(comm, l, n, out, barrier); });
    section("9 split-phase head chunks", [&] { basp::test::head_chunks_procs(comm, l, n, out, barrier); });
  }
  if (comm != nullptr) basp_comm_destroy(comm);
  section("7 hung exchange", [&] { hung_exchange(parent, l, n, out, barrier); });
  section("8 calibration", [&] { calibration(parent, l, out, barrier); });
}
#endif  // BASP_TEST_PROCESSES

#if BASP_TEST_PROCESSES
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const char* program = "test_gpu_nccl_procs";
  const int l = basp::test::world_rank();
  if (!basp::test::every_rank_has_device(program)) {
    MPI_Finalize();
    return basp::test::kSkipped;
  }
  int n = 1;
  int devices = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  TEST_CUDA(cudaGetDeviceCount(&devices));
  if (n < 2) {
    if (l == 0) std::printf("%s: skipped: needs at least 2 processes (mpirun -np N), got %d\n", program, n);
    MPI_Finalize();
    return basp::test::kSkipped;
  }
  if (l == 0) std::printf("%s: %d ranks, one process each, on %d GPU(s)\n", program, n, devices);
  Failures failures;
  const bool ran = basp::test::run_ranks(n, procs_main, failures);
  basp::test::Tally tally;
  tally.checks = failures.checks;
  tally.failures = failures.failed + (ran ? 0 : 1);
  const int code = l == 0 ? tally.finish(program) : (tally.failures == 0 && tally.checks > 0 ? 0 : 1);
  MPI_Finalize();
  return code;
}
#else
int main() {
  const char* program = "test_gpu_nccl_threads";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  int devices = 0;
  TEST_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("%s: skipped: needs at least 2 GPUs, this machine has %d\n", program, devices);
    return basp::test::kSkipped;
  }
  const int k = std::min(devices, kMaxRanks);
  std::printf("%s: %d ranks, one per GPU, one thread each\n", program, k);
  Failures failures;
  if (!basp::test::run_ranks(k, rank_main, failures)) return 1;

  basp::test::Tally tally;
  tally.checks = failures.checks;
  tally.failures = failures.failed;
  return tally.finish(program);
}
#endif  // BASP_TEST_PROCESSES
