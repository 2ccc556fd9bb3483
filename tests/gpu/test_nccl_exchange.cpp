// The NCCL executor's exchange path on one GPU: a one-rank NCCL communicator with the K = 1 local copy turned
// off, so that an execute is pack -> ncclAlltoAll -> unpack, exactly as with K > 1. Checks that the path is
// bit-exact (K = 1: scatter and gather are the identity) with poisoned outputs for both layouts, that it is
// captured in a CUDA graph (kernels and the NCCL all-to-all) and replays correctly on new data, and that an
// aborted communicator makes executes fail with BASP_ERROR_NCCL. Each for GQA and for multi-head latent attention
// (tensors of their own head sizes in one exchange). Split-phase head chunks too (run_chunks; NOT yet run on a GPU).
#include <nccl.h>

#include <cstdio>
#include <random>
#include <vector>

#include "common/error.h"
#include "gpu_util.h"
#include "pattern.h"
#include "plan/exchange.h"
#include "plan/head_chunks.h"
#include "runtime/create.h"
#include "transport/nccl/nccl_backend.h"
#include "transport/nccl/nccl_executor.h"

using basp::test::DeviceBytes;
using basp::test::kPoison;

namespace {

// GQA's Q, K, V at one head size; or multi-head latent attention's (mla): Q, K at 192, V at 128, 16 heads each,
// and the rotary key, one head of 64 serving the 16 query heads (at K = 1 its one holder is this rank).
basp::plan::ExchangePlan make_plan(int32_t layout, bool mla = false) {
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.layout = layout;
  desc.dtype = BASP_DTYPE_BF16;
  desc.seq_len = 300;
  desc.head_dim = 72;
  desc.num_tensors = 3;
  desc.num_heads[0] = 12;
  desc.num_heads[1] = 3;
  desc.num_heads[2] = 3;
  if (mla) {
    desc.seq_len = 37;
    desc.head_dim = 192;
    desc.num_tensors = 4;
    const int64_t heads[4] = {16, 16, 16, 1}, query_heads[4] = {0, 16, 16, 16}, dims[4] = {0, 0, 128, 64};
    for (int t = 0; t < 4; ++t) {
      desc.num_heads[t] = heads[t];
      desc.query_heads[t] = query_heads[t];
      desc.head_dims[t] = dims[t];
    }
  }
  const auto spec = basp::plan::validate_spec(desc);
  return basp::plan::make_exchange_plan(spec, 1, 0, 2);
}

// One plan's tensors for a scatter then a gather on one rank: random input bytes (host[t] uploaded to in[t]), the
// head-sharded outputs and the gathered-back outputs poisoned, and the pointer arrays the executor takes.
struct RoundTrip {
  std::vector<std::vector<std::byte>> host;
  std::vector<DeviceBytes> in, head, back;
  std::vector<const void*> in_ptr, head_cptr;
  std::vector<void*> head_ptr, back_ptr;

  explicit RoundTrip(const basp::plan::ExchangePlan& plan) : host(static_cast<size_t>(plan.num_tensors())) {
    for (int32_t t = 0; t < plan.num_tensors(); ++t) {
      const int64_t bytes = plan.tensors[t].seq_tensor_bytes(0);
      host[t].resize(static_cast<size_t>(bytes));
      in.emplace_back(bytes);
      head.emplace_back(bytes);
      back.emplace_back(bytes);
    }
    for (size_t t = 0; t < host.size(); ++t) {
      in_ptr.push_back(in[t].data());
      head_ptr.push_back(head[t].data());
      head_cptr.push_back(head[t].data());
      back_ptr.push_back(back[t].data());
    }
  }
  void refill(std::mt19937_64& rng) {
    for (size_t t = 0; t < host.size(); ++t) {
      basp::test::fill_random_bytes(host[t], rng);
      in[t].upload(host[t]);
      head[t].fill(kPoison);
      back[t].fill(kPoison);
    }
    TEST_CUDA(cudaDeviceSynchronize());
  }
  // K = 1: both the head-sharded and the gathered-back bytes equal the input's.
  void verify(basp::test::Tally& tally, const char* scatter_what, const char* gather_what) {
    for (size_t t = 0; t < host.size(); ++t) {
      tally.check(basp::test::first_difference(head[t].download(), host[t]) < 0, scatter_what);
      tally.check(basp::test::first_difference(back[t].download(), host[t]) < 0, gather_what);
    }
  }
};

void run_layout(const std::shared_ptr<basp::transport::nccl::GroupComm>& group, int32_t layout, bool mla,
                cudaStream_t stream, basp::test::Tally& tally) {
  std::mt19937_64 rng(5 + layout);
  const auto plan = make_plan(layout, mla);
  std::printf("%s %s:\n", layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD",
              mla ? "MLA (Q, K 192, V 128, rotary key 64)" : "GQA");
  basp::transport::nccl::ExecutorOptions options;
  options.local_copy_when_alone = false;
  auto executor = basp::transport::nccl::make_executor(group, plan, options);
  tally.check(executor->workspace_bytes() > 0, "exchange path has a workspace");

  RoundTrip b(plan);
  auto refill = [&]() { b.refill(rng); };
  auto verify = [&](const char* what) { b.verify(tally, what, what); };

  refill();
  try {
    executor->scatter(plan.tensors[0].seq_len, b.in_ptr.data(), b.head_ptr.data(), stream);
    executor->gather(plan.tensors[0].seq_len, b.head_cptr.data(), b.back_ptr.data(), stream);
    TEST_CUDA(cudaStreamSynchronize(stream));
    tally.check(executor->last_path() == BASP_PATH_NCCL, "the exchange path is the NCCL one");
    verify(layout == BASP_LAYOUT_BSHD ? "BSHD pack -> ncclAlltoAll -> unpack" : "SBHD pack -> ncclAlltoAll -> unpack");
  } catch (const basp::detail::Error& e) {
    tally.check(false, e.what());
  }

  refill();
  cudaGraph_t graph = nullptr;
  TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  bool enqueued = true;
  try {
    executor->scatter(plan.tensors[0].seq_len, b.in_ptr.data(), b.head_ptr.data(), stream);
    executor->gather(plan.tensors[0].seq_len, b.head_cptr.data(), b.back_ptr.data(), stream);
  } catch (const basp::detail::Error& e) {
    enqueued = false;
    std::printf("  capture: %s\n", e.what());
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!tally.check(enqueued && end == cudaSuccess, "execute with ncclAlltoAll captured in a CUDA graph")) {
    std::printf("  end capture: %s\n", cudaGetErrorString(end));
    cudaGetLastError();
    return;
  }
  size_t nodes = 0;
  TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::printf("  captured graph: %zu nodes\n", nodes);
  tally.check(nodes >= 6, "graph holds pack, all-to-all and unpack of both directions");
  cudaGraphExec_t exec = nullptr;
  TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    refill();
    TEST_CUDA(cudaGraphLaunch(exec, stream));
    TEST_CUDA(cudaStreamSynchronize(stream));
    verify("graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Split-phase head chunks (transport::StreamChunks) of the same plans: for C in 1, 2 and max_head_chunks, every
// scatter chunk started in order on the caller's stream and waited for in reverse, then the gather's the same way;
// the device orders each chunk's exchange on the plan's side stream after the caller's work, test() queries its
// event, wait() makes the caller's stream wait on it. Bit-exact (K = 1: the identity) with poisoned outputs; then
// one round captured in a CUDA graph and replayed on new data.
void run_chunks(const std::shared_ptr<basp::transport::nccl::GroupComm>& group, int32_t layout, bool mla,
                cudaStream_t stream, basp::test::Tally& tally) {
  std::mt19937_64 rng(11 + layout);
  const auto plan = make_plan(layout, mla);
  basp::transport::nccl::ExecutorOptions options;
  options.local_copy_when_alone = false;
  auto executor = basp::transport::nccl::make_executor(group, plan, options);
  basp::transport::StreamChunks* chunks = executor->stream_chunks();
  if (!tally.check(chunks != nullptr, "the NCCL executor runs split-phase chunks on the device")) return;
  const int64_t tokens = plan.tensors[0].seq_len;
  RoundTrip b(plan);
  auto refill = [&]() { b.refill(rng); };
  auto round = [&](int32_t count, bool query) {
    for (const basp::Direction dir : {basp::Direction::kScatter, basp::Direction::kGather}) {
      const bool scatter = dir == basp::Direction::kScatter;
      for (int32_t c = 0; c < count; ++c) {
        const basp::plan::CallGeometry call = plan.call(tokens, {c, count}, dir);
        chunks->start(dir, call, scatter ? b.in_ptr.data() : b.head_cptr.data(),
                      scatter ? b.head_ptr.data() : b.back_ptr.data(), stream);
      }
      if (query) {  // the device ends every chunk: test() says so without a wait
        TEST_CUDA(cudaDeviceSynchronize());
        bool all = true;
        for (int32_t c = 0; c < count; ++c) all = chunks->test(dir, c) && all;
        tally.check(all, "test() reports every chunk ended once the device is idle");
      }
      for (int32_t c = count - 1; c >= 0; --c) chunks->wait(dir, c);
    }
  };
  const int32_t max = basp::plan::max_head_chunks(plan);
  for (const int32_t count : {1, 2, max}) {
    refill();
    try {
      round(count, true);
      TEST_CUDA(cudaStreamSynchronize(stream));
      b.verify(tally, "chunked scatter, bit-exact", "chunked gather, bit-exact");
    } catch (const basp::detail::Error& e) {
      tally.check(false, e.what());
    }
    std::printf("  %s %s, %d head chunk(s) started in order, waited in reverse\n",
                layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", mla ? "MLA" : "GQA", count);
  }
  refill();
  cudaGraph_t graph = nullptr;
  TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  bool enqueued = true;
  try {
    round(2, false);
  } catch (const basp::detail::Error& e) {
    enqueued = false;
    std::printf("  chunk capture: %s\n", e.what());
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!tally.check(enqueued && end == cudaSuccess, "a round of head chunks captured in a CUDA graph")) {
    std::printf("  end capture: %s\n", cudaGetErrorString(end));
    cudaGetLastError();
    return;
  }
  cudaGraphExec_t exec = nullptr;
  TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    refill();
    TEST_CUDA(cudaGraphLaunch(exec, stream));
    TEST_CUDA(cudaStreamSynchronize(stream));
    b.verify(tally, "chunk graph replay: scatter", "chunk graph replay: gather");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace

int main() {
  const char* program = "test_gpu_nccl_exchange";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  basp::test::Tally tally;
  TEST_CUDA(cudaSetDevice(0));
  ncclComm_t parent = nullptr;
  const int device = 0;
  const ncclResult_t init = ncclCommInitAll(&parent, 1, &device);
  if (!tally.check(init == ncclSuccess, "ncclCommInitAll(1 rank)")) return tally.finish(program);
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    // Through the creation algorithm every constructor runs (runtime/create.h): agreement, locality, split,
    // connect.
    basp_comm_config_v1 config = BASP_COMM_CONFIG_INITIALIZER;
    config.micro_batch = 2;
    config.backend = BASP_BACKEND_NCCL;
    basp::runtime::CreateCall call;
    call.kind = basp::runtime::CallKind::kCommCreateNccl;
    call.config = &config;
    auto comm = basp::runtime::comm_from_nccl(parent, call);
    auto& transport = dynamic_cast<basp::transport::nccl::NcclGroupTransport&>(comm->transport());
    const auto group = transport.group_comm();
    for (bool mla : {false, true}) {
      run_layout(group, BASP_LAYOUT_BSHD, mla, stream, tally);
      run_layout(group, BASP_LAYOUT_SBHD, mla, stream, tally);
      run_chunks(group, BASP_LAYOUT_BSHD, mla, stream, tally);
      run_chunks(group, BASP_LAYOUT_SBHD, mla, stream, tally);
    }

    // After an abort, the exchange path refuses to enqueue.
    basp::transport::nccl::ExecutorOptions local_off;
    local_off.local_copy_when_alone = false;
    auto executor = basp::transport::nccl::make_executor(group, make_plan(BASP_LAYOUT_BSHD), local_off);
    transport.abort();
    std::string message;
    tally.check(transport.async_error(message) == BASP_ERROR_NCCL, "async error reports the abort");
    DeviceBytes a(1 << 20), b(1 << 20);
    const void* in[3] = {a.data(), a.data(), a.data()};
    void* out[3] = {b.data(), b.data(), b.data()};
    try {
      executor->scatter(make_plan(BASP_LAYOUT_BSHD).tensors[0].seq_len, in, out, stream);
      tally.check(false, "scatter after abort must fail");
    } catch (const basp::detail::Error& e) {
      tally.check(e.status() == BASP_ERROR_NCCL, "scatter after abort: BASP_ERROR_NCCL");
      std::printf("  after abort: %s\n", e.what());
    }
  } catch (const basp::detail::Error& e) {
    tally.check(false, e.what());
  }
  TEST_CUDA(cudaStreamDestroy(stream));
  ncclCommDestroy(parent);
  return tally.finish(program);
}
