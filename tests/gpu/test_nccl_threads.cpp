// The NCCL backend across several GPUs of one machine, through the public C ABI, without MPI: one thread per
// GPU, each one rank of an NCCL communicator made by ncclCommInitAll, so every collective call of libbasp runs
// on all threads at once, as it would in N processes. Checked, with G = 1 (K = number of GPUs, up to 8):
//   1. scatter then gather of Q, K, V (GQA heads) through ncclAlltoAll, BSHD bf16 and SBHD fp32, bit-exact on
//      data that is a function of the global coordinates, outputs poisoned first;
//   2. a plan that differs on the last rank (num_heads[1]): BASP_ERROR_MISMATCH on every rank naming the field,
//      nothing created, and the comm still usable (a correct plan is created after it);
//   3. basp_comm_create_nccl with micro_batch differing on rank 0: BASP_ERROR_MISMATCH on every rank naming it,
//      no comm created.
// Needs at least two GPUs; reports skipped (77) otherwise (NCCL refuses two ranks on one GPU).
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "expected_tensors.h"
#include "gpu_threads.h"
#include "gpu_util.h"

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

// One plan's scatter and gather on rank l, checked against the global pattern.
void exchange(basp_comm_t comm, int l, int64_t k, int32_t layout, basp_dtype_t dtype, int64_t elem, Failures& out,
              Barrier& barrier) {
  const std::string name =
      std::string(layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD") + " elem " + std::to_string(elem) + ": ";
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
    g.b_loc = 2;
    g.seq_len = desc.seq_len;
    g.k = k;
    g.heads = desc.num_heads[t];
    g.split_heads = g.heads;
    g.head_dim = desc.head_dim;
    g.elem = elem;
    geoms.push_back(g);
  }
  const basp::test::ExchangeTensors x = basp::test::exchange_tensors(kSeed, geoms, l);
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
      const int64_t h =
          basp::test::first_difference(head[t].download(), basp::test::head_expected(kSeed, geoms[t], t, l));
      out.check(h < 0, l, name + "scatter of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(h));
      const int64_t s = basp::test::first_difference(back[t].download(), seq[t].download());
      out.check(s < 0, l, name + "gather of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(s));
    }
  }
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  out.check(basp_plan_query(plan, &info) == BASP_SUCCESS && info.last_path == BASP_PATH_NCCL, l,
            name + "the exchange took the NCCL path");
  basp_plan_destroy(plan);
}

void rank_main(int l, int k, ncclComm_t parent, Failures& out, Barrier& barrier) {
  TEST_CUDA(cudaSetDevice(l));
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
  exchange(comm, l, k, BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 2, out, barrier);
  exchange(comm, l, k, BASP_LAYOUT_SBHD, BASP_DTYPE_FP32, 4, out, barrier);

  // 2. A plan that differs on the last rank.
  basp_plan_desc_t desc = qkv_desc(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, k);
  if (l == k - 1) desc.num_heads[1] = 4 * k;
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(&config);
  const basp_status_t rc = basp_plan_create(comm, &desc, &plan);
  out.check(rc == BASP_ERROR_MISMATCH && contains(basp_last_error(), "num_heads[1]"), l,
            std::string("a differing plan: BASP_ERROR_MISMATCH naming num_heads[1], got ") + basp_status_string(rc) +
                ": " + basp_last_error());
  out.check(plan == nullptr, l, "no plan after a mismatch");
  exchange(comm, l, k, BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, 2, out, barrier);  // the comm is still usable
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
