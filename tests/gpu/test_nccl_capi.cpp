// NCCL backend smoke test through the public C ABI on one GPU: one rank, so G = N = 1 and K = 1 (an execute is
// a device-local copy, no NCCL call). Checks: argument errors of basp_comm_create_nccl, scatter/gather of a GQA
// Q/K/V exchange (BSHD, bf16) and of an SBHD fp32 exchange, bit-exact with poisoned outputs; a host pointer
// rejected and nothing written; the execute captured in a CUDA graph and replayed on new data; the async-error
// query; abort, after which the comm is broken (BASP_ERROR_COMM_BROKEN naming the abort). The same plans through a
// comm from basp_comm_create_oob, over a one-rank out-of-band all-gather (a copy), the creation path every framework
// without MPI takes.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "gpu_util.h"
#include "pattern.h"

using basp::test::DeviceBytes;
using basp::test::kPoison;

namespace {

std::string last() { return basp_last_error(); }

// A one-rank out-of-band all-gather: every rank's bytes are this rank's.
int oob_start(void* user, const void* send, void* recv, size_t bytes, void** request) {
  std::memcpy(recv, send, bytes);
  ++*static_cast<int*>(user);
  *request = user;
  return BASP_OOB_SUCCESS;
}
int oob_test(void*, void*) { return BASP_OOB_SUCCESS; }
int oob_free(void*, void*) { return BASP_OOB_SUCCESS; }
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

basp_comm_config_t nccl_config() {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.backend = BASP_BACKEND_NCCL;
  return c;
}

struct Tensors {
  std::vector<DeviceBytes> in, out;
  std::vector<std::vector<std::byte>> host;
  std::vector<const void*> in_ptr;
  std::vector<void*> out_ptr;
};

Tensors make_tensors(const basp_plan_info_t& info, int64_t elem, std::mt19937_64& rng) {
  Tensors x;
  for (int32_t t = 0; t < info.num_tensors; ++t) {
    const int64_t bytes = info.seq_sharded_elems[t] * elem;
    x.host.emplace_back(static_cast<size_t>(bytes));
    basp::test::fill_random_bytes(x.host.back(), rng);
    x.in.emplace_back(bytes);
    x.out.emplace_back(bytes);
    x.in.back().upload(x.host.back());
    x.out.back().fill(kPoison);
  }
  for (int32_t t = 0; t < info.num_tensors; ++t) {
    x.in_ptr.push_back(x.in[t].data());
    x.out_ptr.push_back(x.out[t].data());
  }
  return x;
}

void fill_random_device(const DeviceBytes& d, std::vector<std::byte>& host, std::mt19937_64& rng) {
  basp::test::fill_random_bytes(host, rng);
  d.upload(host);
}

// Scatter then gather (K = 1: both are the identity), plus the graph and error checks on this plan.
void run_plan(basp_comm_t comm, const basp_plan_desc_t& desc, int64_t elem, cudaStream_t stream,
              basp::test::Tally& tally) {
  std::mt19937_64 rng(99 + desc.layout);
  basp_plan_t plan = nullptr;
  if (!tally.check(basp_plan_create(comm, &desc, &plan) == BASP_SUCCESS, "plan create")) {
    std::printf("  %s\n", basp_last_error());
    return;
  }
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  tally.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.group_size == 1 && info.workspace_bytes == 0,
              "plan query: K = 1, no workspace (direct copy)");

  Tensors x = make_tensors(info, elem, rng);
  std::vector<DeviceBytes> back;
  std::vector<void*> back_ptr;
  std::vector<const void*> head_ptr;
  for (int32_t t = 0; t < info.num_tensors; ++t) {
    back.emplace_back(info.seq_sharded_elems[t] * elem);
    back.back().fill(kPoison);
    back_ptr.push_back(back.back().data());
    head_ptr.push_back(x.out[t].data());
  }
  tally.check(basp_scatter(plan, x.in_ptr.data(), x.out_ptr.data(), stream) == BASP_SUCCESS, "scatter");
  tally.check(basp_gather(plan, head_ptr.data(), back_ptr.data(), stream) == BASP_SUCCESS, "gather");
  TEST_CUDA(cudaStreamSynchronize(stream));
  tally.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.last_path == BASP_PATH_LOCAL,
              "K = 1 took the local-copy path");
  for (int32_t t = 0; t < info.num_tensors; ++t) {
    tally.check(basp::test::first_difference(x.out[t].download(), x.host[t]) < 0, "scatter output bit-exact");
    tally.check(basp::test::first_difference(back[t].download(), x.host[t]) < 0, "gather output bit-exact");
  }

  // A host pointer is named and rejected; nothing is written.
  std::vector<std::byte> host_buffer(static_cast<size_t>(info.seq_sharded_elems[0] * elem));
  std::vector<const void*> bad_in = x.in_ptr;
  bad_in[0] = host_buffer.data();
  x.out[0].fill(kPoison);
  TEST_CUDA(cudaDeviceSynchronize());
  tally.check(basp_scatter(plan, bad_in.data(), x.out_ptr.data(), stream) == BASP_ERROR_INVALID_ARGUMENT,
              "host input pointer rejected");
  tally.check(contains(last(), "inputs[0]") && contains(last(), "host memory"), "message names inputs[0]");
  std::printf("  host pointer: %s\n", basp_last_error());
  // The gather's own outputs (back_ptr), not x.out_ptr: those are its inputs (head_ptr), and an output that is
  // also an input is rejected first, for the overlap, naming outputs[1].
  std::vector<void*> bad_out = back_ptr;
  bad_out[0] = host_buffer.data();
  for (auto& b : back) b.fill(kPoison);
  TEST_CUDA(cudaDeviceSynchronize());
  const basp_status_t bad_gather = basp_gather(plan, head_ptr.data(), bad_out.data(), stream);
  if (!tally.check(bad_gather == BASP_ERROR_INVALID_ARGUMENT && contains(last(), "outputs[0]") &&
                       contains(last(), "host memory"),
                   "host output pointer rejected")) {
    std::printf("  host output pointer: %s: %s\n", basp_status_string(bad_gather), basp_last_error());
  }
  TEST_CUDA(cudaStreamSynchronize(stream));
  tally.check(basp::test::first_difference(x.out[0].download(),
                                           std::vector<std::byte>(host_buffer.size(), std::byte{kPoison})) < 0,
              "rejected scatter wrote nothing");
  for (int32_t t = 1; t < info.num_tensors; ++t) {
    const std::vector<std::byte> poisoned(static_cast<size_t>(back[t].bytes()), std::byte{kPoison});
    tally.check(basp::test::first_difference(back[t].download(), poisoned) < 0, "rejected gather wrote nothing");
  }

  // Capture scatter + gather in a graph, then replay it on new inputs.
  for (auto& b : back) b.fill(kPoison);
  for (auto& o : x.out) o.fill(kPoison);
  TEST_CUDA(cudaDeviceSynchronize());
  cudaGraph_t graph = nullptr;
  TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const basp_status_t s1 = basp_scatter(plan, x.in_ptr.data(), x.out_ptr.data(), stream);
  const basp_status_t s2 = basp_gather(plan, head_ptr.data(), back_ptr.data(), stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  tally.check(s1 == BASP_SUCCESS && s2 == BASP_SUCCESS && end == cudaSuccess, "scatter + gather captured");
  if (s1 != BASP_SUCCESS || s2 != BASP_SUCCESS) std::printf("  capture: %s\n", basp_last_error());
  if (end == cudaSuccess && graph != nullptr) {
    cudaGraphExec_t exec = nullptr;
    TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {
      for (int32_t t = 0; t < info.num_tensors; ++t) {
        fill_random_device(x.in[t], x.host[t], rng);
        x.out[t].fill(kPoison);
        back[t].fill(kPoison);
      }
      TEST_CUDA(cudaDeviceSynchronize());
      TEST_CUDA(cudaGraphLaunch(exec, stream));
      TEST_CUDA(cudaStreamSynchronize(stream));
      for (int32_t t = 0; t < info.num_tensors; ++t) {
        tally.check(basp::test::first_difference(x.out[t].download(), x.host[t]) < 0, "graph replay: scatter");
        tally.check(basp::test::first_difference(back[t].download(), x.host[t]) < 0, "graph replay: gather");
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    cudaGetLastError();
  }
  basp_plan_destroy(plan);
}

}  // namespace

int main() {
  const char* program = "test_gpu_nccl_capi";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  basp::test::Tally tally;
  TEST_CUDA(cudaSetDevice(0));
  ncclComm_t parent = nullptr;
  const int device = 0;
  const ncclResult_t init = ncclCommInitAll(&parent, 1, &device);
  if (!tally.check(init == ncclSuccess, "ncclCommInitAll(1 rank)")) {
    std::printf("  %s\n", ncclGetErrorString(init));
    return tally.finish(program);
  }

  // Argument errors: named, nothing created.
  basp_comm_t comm = reinterpret_cast<basp_comm_t>(0x1);
  basp_comm_config_t config = nccl_config();
  tally.check(basp_comm_create_nccl(nullptr, &config, &comm) == BASP_ERROR_NULL_POINTER &&
                  contains(last(), "nccl_comm") && comm == nullptr,
              "NULL nccl_comm");
  config.backend = BASP_BACKEND_MPI;
  tally.check(basp_comm_create_nccl(parent, &config, &comm) == BASP_ERROR_INVALID_ARGUMENT &&
                  contains(last(), "config->backend"),
              "backend MPI given to basp_comm_create_nccl");
  config = nccl_config();
  config.micro_batch = 0;
  tally.check(
      basp_comm_create_nccl(parent, &config, &comm) == BASP_ERROR_INVALID_ARGUMENT && contains(last(), "micro_batch"),
      "micro_batch 0");

  config = nccl_config();
  if (!tally.check(basp_comm_create_nccl(parent, &config, &comm) == BASP_SUCCESS, "basp_comm_create_nccl")) {
    std::printf("  %s\n", basp_last_error());
    ncclCommDestroy(parent);
    return tally.finish(program);
  }
  basp_rank_info_t rank = BASP_RANK_INFO_INITIALIZER;
  tally.check(basp_comm_query(comm, -1, 1024, &rank) == BASP_SUCCESS && rank.world_size == 1 && rank.num_groups == 1 &&
                  rank.group_size == 1,
              "comm query: N = G = K = 1");

  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  basp_plan_desc_t qkv = BASP_PLAN_DESC_INITIALIZER;
  qkv.layout = BASP_LAYOUT_BSHD;
  qkv.dtype = BASP_DTYPE_BF16;
  qkv.seq_len = 1024;
  qkv.head_dim = 128;
  qkv.num_tensors = 3;
  qkv.num_heads[0] = 8;
  qkv.num_heads[1] = 2;
  qkv.num_heads[2] = 2;
  run_plan(comm, qkv, 2, stream, tally);
  basp_plan_desc_t out = BASP_PLAN_DESC_INITIALIZER;
  out.layout = BASP_LAYOUT_SBHD;
  out.dtype = BASP_DTYPE_FP32;
  out.seq_len = 77;
  out.head_dim = 3;
  out.num_tensors = 1;
  out.num_heads[0] = 5;
  run_plan(comm, out, 4, stream, tally);

  // The out-of-band constructor on one rank: the agreement, readiness and the group's ncclCommInitRank over the
  // callbacks, then the same exchanges.
  {
    int gathers = 0;
    basp_oob_t oob = BASP_OOB_INITIALIZER;
    oob.rank = 0;
    oob.num_ranks = 1;
    oob.user_data = &gathers;
    oob.allgather_start = &oob_start;
    oob.allgather_test = &oob_test;
    oob.allgather_free = &oob_free;
    basp_comm_config_t oob_config = nccl_config();
    basp_comm_t from_oob = nullptr;
    if (tally.check(basp_comm_create_oob(&oob, &oob_config, &from_oob) == BASP_SUCCESS, "basp_comm_create_oob")) {
      tally.check(gathers >= 4, "the creation ran its all-gathers over the callbacks");
      run_plan(from_oob, qkv, 2, stream, tally);
      run_plan(from_oob, out, 4, stream, tally);
      tally.check(basp_comm_destroy(from_oob) == BASP_SUCCESS, "destroy the out-of-band comm");
    } else {
      std::printf("  %s\n", basp_last_error());
    }
  }

  // Async errors: none so far.
  basp_status_t async = BASP_ERROR_INTERNAL;
  char message[256] = "unchanged";
  tally.check(basp_comm_get_async_error(comm, &async, message, sizeof(message)) == BASP_SUCCESS &&
                  async == BASP_SUCCESS && message[0] == '\0',
              "no async error");
  tally.check(basp_comm_get_async_error(comm, nullptr, message, sizeof(message)) == BASP_ERROR_NULL_POINTER,
              "async error query: NULL error");

  // Abort: the comm is broken (executes and plan creation fail at once), the query reports it, destroy works.
  basp_plan_t plan = nullptr;
  tally.check(basp_plan_create(comm, &out, &plan) == BASP_SUCCESS, "plan before abort");
  tally.check(basp_comm_abort(comm) == BASP_SUCCESS, "abort");
  {
    DeviceBytes a(77 * 5 * 3 * 4), b(77 * 5 * 3 * 4);
    const void* in[1] = {a.data()};
    void* o[1] = {b.data()};
    tally.check(basp_scatter(plan, in, o, stream) == BASP_ERROR_COMM_BROKEN && contains(last(), "aborted"),
                "scatter after abort: BASP_ERROR_COMM_BROKEN naming the abort");
    std::printf("  after abort: %s\n", basp_last_error());
  }
  basp_plan_t late = nullptr;
  tally.check(basp_plan_create(comm, &out, &late) == BASP_ERROR_COMM_BROKEN && late == nullptr,
              "plan creation after abort: BASP_ERROR_COMM_BROKEN");
  tally.check(basp_comm_get_async_error(comm, &async, message, sizeof(message)) == BASP_SUCCESS &&
                  async == BASP_ERROR_NCCL && contains(message, "aborted"),
              "async error after abort");
  tally.check(basp_comm_abort(comm) == BASP_SUCCESS, "second abort does nothing");
  tally.check(basp_plan_destroy(plan) == BASP_SUCCESS, "plan destroy after abort");
  tally.check(basp_comm_destroy(comm) == BASP_SUCCESS, "comm destroy after abort");
  tally.check(basp_comm_abort(comm) == BASP_ERROR_INVALID_HANDLE, "abort of a destroyed comm");

  TEST_CUDA(cudaStreamDestroy(stream));
  ncclCommDestroy(parent);
  return tally.finish(program);
}
