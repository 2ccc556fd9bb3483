// Batch plans on the NCCL backend (docs/batch.md), in three parts:
//   1. one GPU, the kernels alone: the tag check of a batch exchange (a right tag from every peer: the guard 0, no
//      report; a wrong field (batch id, call, documents) from one position: the guard 1 and the report naming that
//      position and what it sent), and the unpacks under the guard on a GQA shape (guard 0: the scatter's
//      bit-exact with the host implementation, the gather's written; guard 1: every output left poisoned, the
//      summing unpack's too);
//   2. one GPU through the C ABI: a one-rank NCCL comm made for batch plans only (micro_batch 0, batch_capacity),
//      basp_comm_plan_batch and basp_batch_plan_create (K = 1, the local path) bit-exact on THD data, a batch over
//      the capacity refused naming it, calibration refused on one rank, no asynchronous error; the batch gather
//      bit-exact, and the scatter + gather captured in a CUDA graph and replayed twice on new inputs;
//   3. two to eight GPUs of one machine, one thread per GPU as one rank each (as test_gpu_nccl_threads): a new
//      membership every step on the same comm (the world as one group, then {1, N-1}, {2, N-2}, ..., ranks in
//      reverse order, groups of one), BSHD bf16 scatter and gather bit-exact on coordinate data; then one rank given
//      another description, and on a second comm one rank gathering while the others scatter: nothing written,
//      MISMATCH from every rank's next execute and from the comm. A rank whose exchange does not end within two
//      minutes fails and aborts the comm (no hang).
//      Skipped with fewer than two GPUs (NCCL refuses two ranks of one process on one GPU).
// Built with BASP_TEST_PROCESSES=1 it is test_gpu_nccl_batch_procs: part 3 alone, one MPI process per rank, any
// number of ranks per GPU (under `mpirun -np N scripts/gpu/rank-env`: its own NCCL_HOSTID per process).
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "expected_tensors.h"
#include "gpu_threads.h"
#include "gpu_util.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/host_copy.h"
#include "layout/packed_workspace.h"
#include "layout_reference.h"
#include "pattern.h"

using basp::layout::Geometry;
using basp::layout::cuda::ExchangeTag;
using basp::layout::cuda::TagReport;
using basp::test::Barrier;
using basp::test::DeviceBytes;
using basp::test::Failures;
using basp::test::kPoison;

namespace {

bool contains(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

// ---------------------------------------------------------------------------------------------------------------
// 1. The tag check and the guarded unpacks.

[[maybe_unused]] void tag_kernels(basp::test::Tally& tally) {
  constexpr int32_t k = 4;
  constexpr int32_t self = 1;
  const ExchangeTag expected{0x1234567890abcdefull, 42, 7, 3};
  TagReport* report = nullptr;
  TEST_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&report), sizeof(TagReport), cudaHostAllocMapped));
  *report = TagReport();
  TagReport* report_d = nullptr;
  TEST_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&report_d), report, 0));
  DeviceBytes tags(sizeof(ExchangeTag) * k);
  DeviceBytes skip(sizeof(uint32_t));
  auto upload_tags = [&](const std::vector<ExchangeTag>& v) {
    TEST_CUDA(cudaMemcpy(tags.data(), v.data(), sizeof(ExchangeTag) * k, cudaMemcpyHostToDevice));
  };
  auto skip_value = [&] {
    uint32_t v = 7;
    TEST_CUDA(cudaMemcpy(&v, skip.data(), sizeof v, cudaMemcpyDeviceToHost));
    return v;
  };
  // Every peer right; the own slot holds garbage, which must not be read.
  std::vector<ExchangeTag> v(k, expected);
  v[self] = ExchangeTag{1, 2, 3, 4};
  upload_tags(v);
  skip.fill(0xff);
  auto* tags_d = reinterpret_cast<const ExchangeTag*>(tags.data());
  auto* skip_d = reinterpret_cast<uint32_t*>(skip.data());
  tally.check(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0) == cudaSuccess,
              "tag check launch (right tags)");
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 0, "right tags: the guard is 0");
  tally.check(report->found == 0, "right tags: no report");

  // Each field on its own is compared: another call (a gather against a scatter) from position 3 ...
  v[3] = expected;
  v[3].call = 2;
  upload_tags(v);
  TEST_CUDA(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0));
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 1 && report->found == 1 && report->position == 3 && report->seen.call == 2 &&
                  report->expected.call == 3,
              "another call: the guard is 1, the report names position 3 and both calls");
  // ... and other document boundaries, after the report is cleared (the guard is recomputed every time).
  *report = TagReport();
  v[3] = expected;
  v[0] = expected;
  v[0].documents = 8;
  upload_tags(v);
  TEST_CUDA(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0));
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 1 && report->position == 0 && report->seen.documents == 8,
              "other document boundaries: the guard is 1, the report names position 0");
  v[0] = expected;
  upload_tags(v);
  TEST_CUDA(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0));
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 0, "right tags again: the guard is back to 0");
  *report = TagReport();

  // Position 2 sent another batch id.
  v[2] = ExchangeTag{expected.fingerprint, 43, expected.documents, expected.call};
  upload_tags(v);
  tally.check(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0) == cudaSuccess,
              "tag check launch (a wrong tag)");
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 1, "a wrong tag: the guard is 1");
  tally.check(report->found == 1 && report->position == 2 && report->batch_id == 42 && report->seen.batch_id == 43 &&
                  report->seen.fingerprint == expected.fingerprint,
              "a wrong tag: the report names position 2, batch id 42, and what it sent");
  // A later wrong tag does not overwrite the first report.
  v[2] = expected;
  v[3] = ExchangeTag{5, 42, expected.documents, expected.call};
  upload_tags(v);
  TEST_CUDA(basp::layout::cuda::launch_check_tags(tags_d, k, self, expected, skip_d, report_d, 0));
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(skip_value() == 1 && report->position == 2, "a second wrong tag: guard 1, the first report kept");

  // The unpacks under the guard: GQA (8 query heads, 2 KV heads each held by two of the K = 4 positions), this
  // rank at position 1; the host implementation (layout/host_copy.h) is the reference of the scatter's unpack.
  std::mt19937_64 rng(2026);
  std::vector<Geometry> geoms;
  for (int64_t heads : {8, 2}) {
    Geometry g;
    g.layout = BASP_LAYOUT_BSHD;
    g.b_loc = 2;
    g.seq_len = 4 * 6;
    g.k = k;
    g.me = self;
    g.heads = heads;
    g.split_heads = 8;
    g.head_dim = 16;
    g.elem = 2;
    geoms.push_back(g);
  }
  tally.check(!geoms[0].replicated() && geoms[1].replicated(), "the KV tensor's heads are replicated");
  const auto n = static_cast<int32_t>(geoms.size());
  const basp::layout::PackedWorkspace ws = basp::layout::make_slotted_workspace(geoms.data(), n);
  std::vector<std::byte> wire(static_cast<size_t>(ws.bytes()));
  basp::test::fill_random_bytes(wire, rng);
  DeviceBytes wire_d(ws.bytes());
  wire_d.upload(wire);
  for (uint32_t guard : {0u, 1u}) {
    TEST_CUDA(cudaMemcpy(skip.data(), &guard, sizeof guard, cudaMemcpyHostToDevice));
    std::vector<DeviceBytes> out;
    std::vector<void*> out_ptr;
    std::vector<std::vector<std::byte>> want;
    for (int32_t t = 0; t < n; ++t) {
      out.emplace_back(geoms[t].head_tensor_bytes(self));
      out.back().fill(kPoison);
      out_ptr.push_back(out.back().data());
      want.emplace_back(static_cast<size_t>(geoms[t].head_tensor_bytes(self)), std::byte{kPoison});
      if (guard != 0) continue;
      for (int64_t p = 0; p < k; ++p) {
        basp::layout::unpack_head_rows(geoms[t], wire.data() + ws.chunk_offset(t, p), want[t].data(), p);
      }
    }
    const cudaError_t rc =
        basp::layout::cuda::launch_scatter_unpack(geoms.data(), n, ws, wire_d.data(), out_ptr.data(), 0, skip_d);
    tally.check(rc == cudaSuccess, "guarded scatter unpack launch");
    TEST_CUDA(cudaDeviceSynchronize());
    for (int32_t t = 0; t < n; ++t) {
      const int64_t diff = basp::test::first_difference(out[t].download(), want[t]);
      const std::string what = std::string("scatter unpack with guard ") + std::to_string(guard) + ", tensor " +
                               std::to_string(t) + (guard ? ": outputs left poisoned" : ": bit-exact") +
                               " (first wrong byte " + std::to_string(diff) + ")";
      tally.check(diff < 0, what.c_str());
    }
    // The gather side as the executor runs it: the plain unpack (the replicated tensor given no rows there), then
    // the summing unpack of the replicated tensor.
    std::vector<DeviceBytes> seq;
    std::vector<void*> seq_ptr;
    for (int32_t t = 0; t < n; ++t) {
      seq.emplace_back(geoms[t].seq_tensor_bytes(self));
      seq.back().fill(kPoison);
      seq_ptr.push_back(seq.back().data());
    }
    std::vector<Geometry> plain = geoms;
    plain[1].b_loc = 0;
    void* plain_out[2] = {seq_ptr[0], nullptr};
    TEST_CUDA(basp::layout::cuda::launch_gather_unpack(plain.data(), n, ws, wire_d.data(), plain_out, 0, skip_d));
    basp::layout::SumUnpackArgs sum;
    sum.geom = geoms[1];
    sum.tensor = 1;
    sum.dtype = BASP_DTYPE_BF16;
    sum.seq = reinterpret_cast<unsigned char*>(seq_ptr[1]);
    sum.wire = reinterpret_cast<const unsigned char*>(wire_d.data());
    sum.workspace = ws;
    sum.skip = skip_d;
    TEST_CUDA(basp::layout::cuda::launch_sum_unpack(sum, 0));
    TEST_CUDA(cudaDeviceSynchronize());
    for (int32_t t = 0; t < n; ++t) {
      const std::vector<std::byte> got = seq[t].download();
      const bool poisoned = std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{kPoison}; });
      const std::string what = std::string("gather unpacks with guard ") + std::to_string(guard) + ", tensor " +
                               std::to_string(t) + (guard ? ": left poisoned" : ": written");
      tally.check(guard ? poisoned : !poisoned, what.c_str());
    }
  }
  TEST_CUDA(cudaFreeHost(report));
}

// ---------------------------------------------------------------------------------------------------------------
// 2. One rank through the C ABI.

basp_comm_config_t batch_config(int64_t capacity) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 0;
  c.batch_capacity = capacity;
  c.backend = BASP_BACKEND_NCCL;
  c.timeout_ms = 60000;
  return c;
}

[[maybe_unused]] void one_rank(basp::test::Tally& tally) {
  ncclComm_t parent = nullptr;
  int device = 0;
  if (!tally.check(ncclCommInitAll(&parent, 1, &device) == ncclSuccess, "ncclCommInitAll of one GPU")) return;
  const basp_comm_config_t config = batch_config(96);
  basp_comm_t comm = nullptr;
  if (!tally.check(basp_comm_create_nccl(parent, &config, &comm) == BASP_SUCCESS,
                   (std::string("batch comm create: ") + basp_last_error()).c_str())) {
    ncclCommDestroy(parent);
    return;
  }
  const int64_t lengths[3] = {40, 7, 33};
  basp_batch_problem_t problem = BASP_BATCH_PROBLEM_INITIALIZER;
  problem.num_docs = 3;
  problem.lengths = lengths;
  problem.query_heads = 4;
  problem.kv_heads = 2;
  problem.head_dim = 16;
  problem.dtype = BASP_DTYPE_BF16;
  int32_t group_sizes[1] = {0};
  int32_t ranks[1] = {-1};
  int32_t group_docs[1] = {0};
  int32_t docs[3] = {-1, -1, -1};
  basp_batch_t batch = BASP_BATCH_INITIALIZER;
  double predicted = -1;
  const basp_status_t prc =
      basp_comm_plan_batch(comm, &problem, group_sizes, ranks, group_docs, docs, &batch, &predicted);
  tally.check(
      prc == BASP_SUCCESS && batch.num_groups == 1 && group_sizes[0] == 1 && ranks[0] == 0 && group_docs[0] == 3,
      (std::string("the planner: one group of one rank with every document: ") + basp_last_error()).c_str());
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.layout = BASP_LAYOUT_THD;
  desc.dtype = BASP_DTYPE_BF16;
  desc.head_dim = 16;
  desc.num_tensors = 2;
  desc.num_heads[0] = 4;
  desc.num_heads[1] = 2;
  basp_plan_t plan = nullptr;
  if (tally.check(basp_batch_plan_create(comm, &desc, &batch, &plan) == BASP_SUCCESS,
                  (std::string("batch plan create: ") + basp_last_error()).c_str())) {
    basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
    tally.check(
        basp_plan_query(plan, &info) == BASP_SUCCESS && info.plan_path == BASP_PATH_LOCAL && info.local_tokens == 80,
        "the batch plan: local path, 80 tokens");
    std::mt19937_64 rng(5);
    std::vector<DeviceBytes> in, out;
    std::vector<std::vector<std::byte>> host;
    const void* in_ptr[2] = {};
    void* out_ptr[2] = {};
    for (int t = 0; t < 2; ++t) {
      const int64_t bytes = info.seq_sharded_elems[t] * 2;
      host.emplace_back(static_cast<size_t>(bytes));
      basp::test::fill_random_bytes(host.back(), rng);
      in.emplace_back(bytes);
      out.emplace_back(bytes);
      in.back().upload(host.back());
      out.back().fill(kPoison);
      in_ptr[t] = in.back().data();
      out_ptr[t] = out.back().data();
    }
    cudaStream_t stream = nullptr;
    TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    TEST_CUDA(cudaDeviceSynchronize());
    tally.check(basp_scatter(plan, in_ptr, out_ptr, stream) == BASP_SUCCESS,
                (std::string("batch scatter: ") + basp_last_error()).c_str());
    TEST_CUDA(cudaStreamSynchronize(stream));
    for (int t = 0; t < 2; ++t) {
      tally.check(basp::test::first_difference(out[t].download(), host[t]) < 0, "K = 1 batch scatter: bit-exact");
    }
    tally.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.last_path == BASP_PATH_LOCAL,
                "the scatter took the local path");
    // The gather back, into poisoned buffers.
    std::vector<DeviceBytes> back;
    void* back_ptr[2] = {};
    const void* head_ptr[2] = {};
    for (int t = 0; t < 2; ++t) {
      back.emplace_back(info.seq_sharded_elems[t] * 2);
      back.back().fill(kPoison);
      back_ptr[t] = back.back().data();
      head_ptr[t] = out[t].data();
    }
    TEST_CUDA(cudaDeviceSynchronize());
    const basp_status_t gathered = basp_gather(plan, head_ptr, back_ptr, stream);
    tally.check(gathered == BASP_SUCCESS, (std::string("batch gather: ") + basp_last_error()).c_str());
    TEST_CUDA(cudaStreamSynchronize(stream));
    for (int t = 0; t < 2; ++t) {
      tally.check(basp::test::first_difference(back[t].download(), host[t]) < 0, "K = 1 batch gather: bit-exact");
    }
    // A batch scatter + gather captured in a CUDA graph (global capture mode, as PyTorch's CUDA graphs use), then
    // replayed twice on new inputs into poisoned outputs: the execute enqueues only, asks nothing that breaks a
    // capture, and the graph moves the new data.
    for (int t = 0; t < 2; ++t) {
      out[t].fill(kPoison);
      back[t].fill(kPoison);
    }
    TEST_CUDA(cudaDeviceSynchronize());
    cudaGraph_t graph = nullptr;
    TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const basp_status_t s1 = basp_scatter(plan, in_ptr, out_ptr, stream);
    const basp_status_t s2 = basp_gather(plan, head_ptr, back_ptr, stream);
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!tally.check(s1 == BASP_SUCCESS && s2 == BASP_SUCCESS && end == cudaSuccess && graph != nullptr,
                     "batch scatter + gather captured in a graph")) {
      std::printf("  capture: scatter %s, gather %s, end %s: %s\n", basp_status_string(s1), basp_status_string(s2),
                  cudaGetErrorString(end), basp_last_error());
    }
    if (end == cudaSuccess && graph != nullptr) {
      size_t nodes = 0;
      TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
      tally.check(nodes > 0, "the captured graph has nodes");
      cudaGraphExec_t exec = nullptr;
      TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int replay = 0; replay < 2; ++replay) {
        for (int t = 0; t < 2; ++t) {
          basp::test::fill_random_bytes(host[t], rng);
          in[t].upload(host[t]);
          out[t].fill(kPoison);
          back[t].fill(kPoison);
        }
        TEST_CUDA(cudaDeviceSynchronize());
        TEST_CUDA(cudaGraphLaunch(exec, stream));
        TEST_CUDA(cudaStreamSynchronize(stream));
        for (int t = 0; t < 2; ++t) {
          tally.check(basp::test::first_difference(out[t].download(), host[t]) < 0,
                      "graph replay: batch scatter bit-exact on new inputs");
          tally.check(basp::test::first_difference(back[t].download(), host[t]) < 0,
                      "graph replay: batch gather bit-exact on new inputs");
        }
      }
      TEST_CUDA(cudaGraphExecDestroy(exec));
      TEST_CUDA(cudaGraphDestroy(graph));
    }
    TEST_CUDA(cudaStreamDestroy(stream));
    basp_plan_destroy(plan);
  }
  // Over the capacity: 97 tokens on one rank.
  const int64_t big[1] = {97};
  int32_t one_size[1] = {1};
  int32_t one_rank[1] = {0};
  int32_t one_docs[1] = {1};
  basp_batch_t over = BASP_BATCH_INITIALIZER;
  over.num_groups = 1;
  over.num_docs = 1;
  over.group_sizes = one_size;
  over.ranks = one_rank;
  over.group_docs = one_docs;
  over.lengths = big;
  plan = nullptr;
  const basp_status_t orc = basp_batch_plan_create(comm, &desc, &over, &plan);
  tally.check(
      orc == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "batch_capacity (96)") && plan == nullptr,
      (std::string("a batch over the capacity: INVALID_ARGUMENT naming batch_capacity: ") + basp_last_error()).c_str());
  const basp_status_t crc = basp_comm_calibrate(comm, 0, 0);
  tally.check(crc == BASP_ERROR_UNSUPPORTED, "calibration of one rank: UNSUPPORTED");
  basp_status_t async = BASP_ERROR_INTERNAL;
  char message[256] = {};
  tally.check(basp_comm_get_async_error(comm, &async, message, sizeof message) == BASP_SUCCESS && async == BASP_SUCCESS,
              "no asynchronous error");
  tally.check(basp_comm_destroy(comm) == BASP_SUCCESS, "batch comm destroy");
  ncclCommDestroy(parent);
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Several GPUs, one thread each.

constexpr uint64_t kSeed = 4242;
constexpr int kMaxRanks = 8;
constexpr int64_t kSeq = 840;  // divisible by every K in 1..8: every split is even, every chunk the same size
constexpr int64_t kHeadsQ = 840;
constexpr int64_t kHeadsKV = 840;  // GQA is in the MPI tests and in part 1; here every K splits both evenly
constexpr int64_t kDim = 8;

// A membership: group sizes and the world ranks, group by group.
struct Membership {
  std::vector<int32_t> sizes;
  std::vector<int32_t> ranks;
};

std::vector<Membership> memberships(int n) {
  std::vector<Membership> out;
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  out.push_back({{n}, all});
  for (int a = 1; a < n; ++a) out.push_back({{a, n - a}, all});
  std::vector<int32_t> reversed(all.rbegin(), all.rend());
  out.push_back({{n}, reversed});
  if (n >= 3) out.push_back({{1, 2, n - 3 > 0 ? n - 3 : 0}, reversed});
  if (out.back().sizes.back() == 0) out.back().sizes.pop_back();
  out.push_back({std::vector<int32_t>(static_cast<size_t>(n), 1), all});
  return out;
}

basp_plan_desc_t bshd_desc() {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = kSeq;
  d.head_dim = kDim;
  d.num_tensors = 2;
  d.num_heads[0] = kHeadsQ;
  d.num_heads[1] = kHeadsKV;
  return d;
}

// This rank's group and position in `m`.
void locate(const Membership& m, int rank, int& group, int& position, int& k) {
  size_t at = 0;
  for (size_t g = 0; g < m.sizes.size(); ++g) {
    for (int32_t p = 0; p < m.sizes[g]; ++p, ++at) {
      if (m.ranks[at] == rank) {
        group = static_cast<int>(g);
        position = p;
        k = m.sizes[g];
      }
    }
  }
}

// Waits for `stream` (at most two minutes: a peer that enqueued nothing leaves the exchange waiting for ever); on
// timeout, records the failure and aborts the comm, which ends the exchange.
void finish(cudaStream_t stream, basp_comm_t comm, int l, Failures& out, const std::string& what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) {
      out.check(false, l, what + ": the stream failed: " + cudaGetErrorString(rc));
      return;
    }
    if (std::chrono::steady_clock::now() > end) {
      out.check(false, l, what + ": the exchange did not end within 120 s; aborting the comm");
      if (comm != nullptr) basp_comm_abort(comm);
      cudaStreamSynchronize(stream);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// How a step's ranks disagree.
enum class Disagree {
  kNone,
  // `m` is the world as one group and the last rank lists its ranks in reverse order: every chunk keeps its size
  // (K divides the tokens and the heads), but every rank receives a tag of another fingerprint.
  kDescription,
  // The last rank gathers while the others scatter (the same plan, the same sizes): the tags differ in their call.
  kOperation,
};

// One step: the batch plan of membership `m` (one sequence per group), an execute then another, checked. Agreeing,
// a scatter then a gather, bit-exact. Disagreeing (every rank's first execute enqueues and writes nothing; once
// every rank's has ended, every rank's second execute fails with MISMATCH before enqueuing anything, and the comm
// reports the mismatch).
void step(basp_comm_t comm, int l, Membership m, int index, Disagree disagree, Failures& out, Barrier& barrier) {
  const bool other = disagree != Disagree::kNone;
  const char* kind = disagree == Disagree::kDescription ? " (another description)"
                     : disagree == Disagree::kOperation ? " (another operation)"
                                                        : "";
  const std::string name = "membership " + std::to_string(index) + kind + ": ";
  std::vector<int32_t> docs(m.sizes.size(), 1);
  const int n = static_cast<int>(m.ranks.size());
  const bool odd_one = l == n - 1;
  if (disagree == Disagree::kDescription && odd_one) std::reverse(m.ranks.begin(), m.ranks.end());
  int group = -1, position = -1, k = 0;
  locate(m, l, group, position, k);
  basp_batch_t batch = BASP_BATCH_INITIALIZER;
  batch.num_groups = static_cast<int32_t>(m.sizes.size());
  batch.num_docs = 0;
  for (int32_t d : docs) batch.num_docs += d;
  batch.group_sizes = m.sizes.data();
  batch.ranks = m.ranks.data();
  batch.group_docs = docs.data();
  const basp_plan_desc_t desc = bshd_desc();
  basp_plan_t plan = nullptr;
  const bool made = basp_batch_plan_create(comm, &desc, &batch, &plan) == BASP_SUCCESS;
  out.check(made, l, name + "batch plan create: " + (made ? "" : basp_last_error()));
  std::vector<Geometry> geoms;
  for (int64_t heads : {kHeadsQ, kHeadsKV}) {
    Geometry g;
    g.layout = BASP_LAYOUT_BSHD;
    g.b_loc = 1;
    g.seq_len = kSeq;
    g.k = k;
    g.heads = heads;
    g.split_heads = heads;
    g.head_dim = kDim;
    g.elem = 2;
    geoms.push_back(g);
  }
  const uint64_t seed = kSeed + 131 * static_cast<uint64_t>(index) + static_cast<uint64_t>(group);
  const basp::test::ExchangeTensors x = basp::test::exchange_tensors(seed, geoms, position);
  const std::vector<DeviceBytes>& seq = x.seq;
  const std::vector<DeviceBytes>& head = x.head;
  const std::vector<DeviceBytes>& back = x.back;
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Executes only where every rank made its plan: a rank without one would leave its peers waiting.
  const bool everyone = barrier.all(made);
  bool ran = false;
  const void* in[2] = {seq[0].data(), seq[1].data()};
  void* mid[2] = {head[0].data(), head[1].data()};
  const void* mid_in[2] = {head[0].data(), head[1].data()};
  void* out_t[2] = {back[0].data(), back[1].data()};
  // The first execute: a scatter, but the last rank's a gather when the operations disagree.
  const bool first_gathers = disagree == Disagree::kOperation && odd_one;
  if (everyone) {
    ran = (first_gathers ? basp_gather(plan, mid_in, out_t, stream) : basp_scatter(plan, in, mid, stream)) ==
          BASP_SUCCESS;
    out.check(ran, l, name + "first execute: " + (ran ? "" : basp_last_error()));
  }
  if (other) {
    // Every rank's first execute has ended, its tag check with it: every second execute now fails before
    // enqueuing anything (had some enqueued and others not, the enqueued ones would wait for ever).
    finish(stream, comm, l, out, name + "first execute");
    barrier.wait();
  }
  if (everyone) {
    const basp_status_t second =
        first_gathers ? basp_scatter(plan, in, mid, stream) : basp_gather(plan, mid_in, out_t, stream);
    const basp_status_t want = other ? BASP_ERROR_MISMATCH : BASP_SUCCESS;
    out.check(second == want, l,
              name + "second execute: " + basp_status_string(second) + (second == BASP_SUCCESS ? "" : ": ") +
                  (second == BASP_SUCCESS ? "" : basp_last_error()));
    if (other) {
      out.check(contains(basp_last_error(), "another batch plan or execute"), l,
                name + "the second execute's MISMATCH names the disagreement: " + basp_last_error());
    }
  }
  finish(stream, comm, l, out, name + "the exchanges");
  TEST_CUDA(cudaStreamDestroy(stream));
  barrier.wait();
  const bool wronged = other;  // every rank received a tag it did not expect
  if (ran) {
    for (int t = 0; t < 2; ++t) {
      const std::vector<std::byte> got = head[t].download();
      if (wronged) {
        const bool poisoned = std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{kPoison}; });
        out.check(poisoned, l, name + "tensor " + std::to_string(t) + ": the scatter wrote nothing");
        const std::vector<std::byte> back_got = back[t].download();
        out.check(std::all_of(back_got.begin(), back_got.end(), [](std::byte b) { return b == std::byte{kPoison}; }), l,
                  name + "tensor " + std::to_string(t) + ": the gather wrote nothing");
        continue;
      }
      const int64_t h = basp::test::first_difference(got, basp::test::head_expected(seed, geoms[t], t, position));
      out.check(h < 0, l, name + "scatter of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(h));
      const int64_t s = basp::test::first_difference(back[t].download(), seq[t].download());
      out.check(s < 0, l, name + "gather of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(s));
    }
  }
  if (made) {
    basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
    const basp_path_t want = k == 1 ? BASP_PATH_LOCAL : BASP_PATH_NCCL;
    out.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.plan_path == want, l, name + "the plan's path");
    basp_plan_destroy(plan);
  }
  if (wronged) {
    // The mismatch found on the device is reported by the comm (and by its next batch execute).
    basp_status_t async = BASP_SUCCESS;
    char message[512] = {};
    const bool asked = basp_comm_get_async_error(comm, &async, message, sizeof message) == BASP_SUCCESS;
    out.check(asked && async == BASP_ERROR_MISMATCH && contains(message, "another batch plan or execute"), l,
              name + "the async error is BASP_ERROR_MISMATCH naming the other batch plan: " + message);
  }
}

void rank_main(int l, int n, ncclComm_t parent, Failures& out, Barrier& barrier) {
  TEST_CUDA(cudaSetDevice(basp::test::device_of(l)));
  const basp_comm_config_t config = batch_config(kSeq);
  basp_comm_t comm = nullptr;
  if (basp_comm_create_nccl(parent, &config, &comm) != BASP_SUCCESS) {
    out.check(false, l, std::string("batch comm create: ") + basp_last_error());
    comm = nullptr;  // the steps still meet the other threads at every barrier, and fail their checks
  }
  barrier.wait();  // every rank's creation has ended before the first step allocates
  const std::vector<Membership> list = memberships(n);
  for (size_t i = 0; i < list.size(); ++i) step(comm, l, list[i], static_cast<int>(i), Disagree::kNone, out, barrier);
  // The world as one group, the last rank on another description: the comm's batch plans fail from then on.
  const auto last = static_cast<int>(list.size());
  step(comm, l, list[0], last, Disagree::kDescription, out, barrier);
  if (comm != nullptr) out.check(basp_comm_destroy(comm) == BASP_SUCCESS, l, "comm destroy");
  barrier.wait();
  // A fresh comm: one agreeing step, then the last rank on another operation.
  comm = nullptr;
  if (basp_comm_create_nccl(parent, &config, &comm) != BASP_SUCCESS) {
    out.check(false, l, std::string("second batch comm create: ") + basp_last_error());
    comm = nullptr;
  }
  barrier.wait();
  step(comm, l, list[0], last + 1, Disagree::kNone, out, barrier);
  step(comm, l, list[0], last + 2, Disagree::kOperation, out, barrier);
  if (comm != nullptr) out.check(basp_comm_destroy(comm) == BASP_SUCCESS, l, "second comm destroy");
}

#if BASP_TEST_PROCESSES
// Part 3 over the MPI processes of the world; the same result on every rank.
int several_processes(const char* program) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 2) {
    if (basp::test::world_rank() == 0) std::printf("%s: skipped: needs at least 2 processes, got %d\n", program, n);
    return -1;
  }
  if (n > kMaxRanks) {
    if (basp::test::world_rank() == 0)
      std::printf("%s: skipped: at most %d processes, got %d\n", program, kMaxRanks, n);
    return -1;
  }
  Failures failures;
  if (!basp::test::run_ranks(n, rank_main, failures)) return 1;
  if (basp::test::world_rank() == 0) {
    std::printf("%s: part 3, %d ranks: %lld checks, %lld failed\n", program, n, static_cast<long long>(failures.checks),
                static_cast<long long>(failures.failed));
  }
  return failures.failed == 0 && failures.checks > 0 ? 0 : 1;
}
#else
int several_gpus(const char* program) {
  int devices = 0;
  TEST_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("%s: part 3 skipped: needs at least 2 GPUs, this machine has %d\n", program, devices);
    return -1;
  }
  const int n = std::min(devices, kMaxRanks);
  Failures failures;
  if (!basp::test::run_ranks(n, rank_main, failures)) return 1;
  std::printf("%s: part 3, %d ranks: %lld checks, %lld failed\n", program, n, static_cast<long long>(failures.checks),
              static_cast<long long>(failures.failed));
  return failures.failed == 0 && failures.checks > 0 ? 0 : 1;
}

#endif  // BASP_TEST_PROCESSES

}  // namespace

#if BASP_TEST_PROCESSES
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const char* program = "test_gpu_nccl_batch_procs";
  if (!basp::test::every_rank_has_device(program)) {
    MPI_Finalize();
    return basp::test::kSkipped;
  }
  const int several = several_processes(program);
  MPI_Finalize();
  if (several < 0) return basp::test::kSkipped;
  return several;
}
#else
int main() {
  const char* program = "test_gpu_nccl_batch";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  basp::test::Tally tally;
  tag_kernels(tally);
  one_rank(tally);
  const int several = several_gpus(program);
  if (several == 1) tally.failures += 1;
  return tally.finish(program);
}
#endif  // BASP_TEST_PROCESSES
