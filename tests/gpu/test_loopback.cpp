// Loopback test on one GPU: K virtual ranks of one group live in this process, each with its own tensors, send
// and receive workspaces. Each rank runs the same launches as the NCCL executor (pack -> exchange -> unpack); the
// all-to-all between them is emulated with device-to-device copies (block j of rank i's send buffer -> block i of
// rank j's receive buffer). Checked end to end, bit-exact against data that is a function of global coordinates,
// outputs poisoned first, for K = 2, 3, 4, 8, both layouts and element sizes 1, 2, 4, 8; then gathered back.
// Multi-head latent attention (Q, K and V of their own head sizes in one exchange) runs through the uniform path,
// and through the general one with its rotary key: one head held by every rank, summed by the gather.
//
// Then it asks whether NCCL accepts several ranks on one GPU (ncclCommInitAll with the same device twice) and
// says so; if it does, a real K = 2 exchange runs through the public C ABI, one thread per rank.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "basp/basp.h"
#include "expected_tensors.h"
#include "gpu_util.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/host_copy.h"
#include "layout/sum_rows.h"
#include "layout_reference.h"
#include "pattern.h"
#include "split_reference.h"

#if BASP_HAVE_NCCL
#include <nccl.h>
#endif

using basp::layout::Geometry;
using basp::layout::PackedWorkspace;
using basp::test::DeviceBytes;
using basp::test::kPoison;

namespace {

constexpr uint64_t kSeed = 4242;

std::vector<std::byte> seq_input(const Geometry& g, int32_t t, int64_t l) {
  return basp::test::seq_input(kSeed, g, t, l);
}

std::vector<std::byte> head_expected(const Geometry& g, int32_t t, int64_t l) {
  return basp::test::head_expected(kSeed, g, t, l);
}

struct Rank {
  std::vector<DeviceBytes> seq, head, back;
  DeviceBytes send, recv;
  Rank(int64_t ws_bytes) : send(ws_bytes), recv(ws_bytes) {}
};

void loopback_case(const basp::test::Shape& shape, int32_t layout, int64_t elem, basp::test::Tally& tally) {
  const auto geoms = basp::test::geometries(shape, layout, elem);
  const auto n = static_cast<int32_t>(geoms.size());
  const int64_t k = shape.k;
  const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
  char name[200];
  std::snprintf(name, sizeof(name), "loopback K %lld layout %s elem %lld", static_cast<long long>(k),
                layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", static_cast<long long>(elem));

  std::vector<Rank> ranks;
  for (int64_t l = 0; l < k; ++l) {
    ranks.emplace_back(ws.bytes());
    Rank& r = ranks.back();
    r.send.fill(kPoison);
    r.recv.fill(kPoison);
    for (int32_t t = 0; t < n; ++t) {
      r.seq.emplace_back(geoms[t].seq_tensor_bytes(0));
      r.head.emplace_back(geoms[t].seq_tensor_bytes(0));
      r.back.emplace_back(geoms[t].seq_tensor_bytes(0));
      r.seq[t].upload(seq_input(geoms[t], t, l));
      r.head[t].fill(kPoison);
      r.back[t].fill(kPoison);
    }
  }
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreate(&stream));

  auto ptrs = [&](std::vector<DeviceBytes>& v) {
    std::vector<void*> p;
    for (auto& b : v) p.push_back(b.data());
    return p;
  };
  auto all_to_all = [&]() {
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        TEST_CUDA(cudaMemcpyAsync(ranks[j].recv.data() + i * ws.peer_stride[0],
                                  ranks[i].send.data() + j * ws.peer_stride[0], static_cast<size_t>(ws.peer_stride[0]),
                                  cudaMemcpyDeviceToDevice, stream));
  };
  bool launched = true;
  // Scatter.
  for (auto& r : ranks) {
    auto in = ptrs(r.seq);
    std::vector<const void*> cin(in.begin(), in.end());
    launched &=
        basp::layout::cuda::launch_scatter_pack(geoms.data(), n, ws, cin.data(), r.send.data(), stream) == cudaSuccess;
  }
  all_to_all();
  for (auto& r : ranks) {
    auto out = ptrs(r.head);
    launched &= basp::layout::cuda::launch_scatter_unpack(geoms.data(), n, ws, r.recv.data(), out.data(), stream) ==
                cudaSuccess;
  }
  // Gather back, through poisoned workspaces.
  TEST_CUDA(cudaStreamSynchronize(stream));
  for (auto& r : ranks) {
    r.send.fill(kPoison);
    r.recv.fill(kPoison);
  }
  for (auto& r : ranks) {
    auto in = ptrs(r.head);
    std::vector<const void*> cin(in.begin(), in.end());
    launched &=
        basp::layout::cuda::launch_gather_pack(geoms.data(), n, ws, cin.data(), r.send.data(), stream) == cudaSuccess;
  }
  all_to_all();
  for (auto& r : ranks) {
    auto out = ptrs(r.back);
    launched &=
        basp::layout::cuda::launch_gather_unpack(geoms.data(), n, ws, r.recv.data(), out.data(), stream) == cudaSuccess;
  }
  TEST_CUDA(cudaStreamSynchronize(stream));
  TEST_CUDA(cudaStreamDestroy(stream));
  tally.check(launched, name);
  for (int64_t l = 0; l < k; ++l) {
    for (int32_t t = 0; t < n; ++t) {
      const int64_t head_diff =
          basp::test::first_difference(ranks[l].head[t].download(), head_expected(geoms[t], t, l));
      if (!tally.check(head_diff < 0, name))
        std::printf("  scatter: rank %lld tensor %d first wrong byte %lld\n", static_cast<long long>(l), t,
                    static_cast<long long>(head_diff));
      const int64_t back_diff = basp::test::first_difference(ranks[l].back[t].download(), seq_input(geoms[t], t, l));
      if (!tally.check(back_diff < 0, name))
        std::printf("  gather: rank %lld tensor %d first wrong byte %lld\n", static_cast<long long>(l), t,
                    static_cast<long long>(back_diff));
    }
  }
  std::printf("%s: %s\n", name, tally.failures == 0 ? "ok" : "FAILED so far");
}

// The general path on one GPU: K virtual ranks, each with its geometries seen from its position and its
// slotted workspace, the executor's launches (pack, unpack, the summing unpack of replicated heads), the grouped
// send/recv emulated by one device copy per chunk of its own size. Several tensors (of their own head counts, head
// sizes and splits) go in one exchange, as in the NCCL executor. The scatter against the coordinate formulas; the
// gather of a tensor without replicated heads against the input and, for one with (random values whose sums
// round), bit for bit against the host's summing gather (layout::gather_rows) on the same contributions: host and
// device must agree.
void general_case(const std::vector<Geometry>& base, int32_t dtype, basp::test::Tally& tally) {
  const int64_t k = base[0].k;
  const auto n = static_cast<int32_t>(base.size());
  std::vector<basp::test::GeometryRef<Geometry>> ref;
  char name[240];
  int at = std::snprintf(name, sizeof(name), "general K %lld layout %d S %lld dtype %d heads/split x D",
                         static_cast<long long>(k), base[0].layout, static_cast<long long>(base[0].seq_len), dtype);
  for (const Geometry& b : base) {
    ref.emplace_back(b);
    at += std::snprintf(name + at, sizeof(name) - static_cast<size_t>(at), " %lld/%lld x %lld",
                        static_cast<long long>(b.heads), static_cast<long long>(b.split_heads),
                        static_cast<long long>(b.head_dim));
  }
  // Per rank l: its geometries, workspace, buffers; per tensor t the host copies.
  std::vector<std::vector<Geometry>> g(static_cast<size_t>(k));
  std::vector<PackedWorkspace> ws(static_cast<size_t>(k));
  std::vector<std::vector<std::vector<std::byte>>> seq_host(static_cast<size_t>(k)), head_host(static_cast<size_t>(k));
  std::vector<std::vector<DeviceBytes>> seq(static_cast<size_t>(k)), head(static_cast<size_t>(k)),
      back(static_cast<size_t>(k));
  std::vector<DeviceBytes> send, recv;
  std::mt19937_64 rng(kSeed + static_cast<uint64_t>(k));
  for (int64_t l = 0; l < k; ++l) {
    for (int32_t t = 0; t < n; ++t) g[l].push_back(base[t].seen_from(l));
    ws[l] = basp::layout::make_slotted_workspace(g[l].data(), n);
    for (int32_t t = 0; t < n; ++t) {
      const Geometry& bt = base[t];
      std::vector<std::byte> in(static_cast<size_t>(g[l][t].seq_tensor_bytes(l)));
      for (int64_t b = 0; b < bt.b_loc; ++b)
        for (int64_t s = 0; s < ref[t].tc(l); ++s)
          for (int64_t h = 0; h < bt.heads; ++h)
            for (int64_t d = 0; d < bt.head_dim; ++d)
              for (int64_t e = 0; e < bt.elem; ++e)
                in[ref[t].seq_index(l, b, s, h, d) * bt.elem + e] =
                    std::byte{basp::test::pattern_byte(kSeed, t, b, ref[t].tok[l] + s, h, d, e)};
      seq[l].emplace_back(static_cast<int64_t>(in.size()));
      head[l].emplace_back(g[l][t].head_tensor_bytes(l));
      back[l].emplace_back(static_cast<int64_t>(in.size()));
      seq[l][t].upload(in);
      head[l][t].fill(kPoison);
      back[l][t].fill(kPoison);
      seq_host[l].push_back(std::move(in));
    }
    send.emplace_back(ws[l].bytes());
    recv.emplace_back(ws[l].bytes());
  }
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreate(&stream));
  bool launched = true;
  auto const_ptrs = [](std::vector<DeviceBytes>& v) {
    std::vector<const void*> p;
    for (auto& b : v) p.push_back(b.data());
    return p;
  };
  auto exchange = [&](bool scatter) {
    for (int64_t l = 0; l < k; ++l) {
      send[l].fill(kPoison);
      recv[l].fill(kPoison);
      const std::vector<const void*> in = const_ptrs(scatter ? seq[l] : head[l]);
      launched &=
          (scatter ? basp::layout::cuda::launch_scatter_pack(g[l].data(), n, ws[l], in.data(), send[l].data(), stream)
                   : basp::layout::cuda::launch_gather_pack(g[l].data(), n, ws[l], in.data(), send[l].data(),
                                                            stream)) == cudaSuccess;
    }
    for (int32_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const int64_t bytes = scatter ? base[t].chunk_bytes(i, j) : base[t].chunk_bytes(j, i);
          if (bytes > 0) {
            TEST_CUDA(cudaMemcpyAsync(recv[j].data() + ws[j].chunk_offset(t, i),
                                      send[i].data() + ws[i].chunk_offset(t, j), static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToDevice, stream));
          }
        }
    for (int64_t l = 0; l < k; ++l) {
      if (scatter) {
        std::vector<void*> out;
        for (auto& b : head[l]) out.push_back(b.data());
        launched &= basp::layout::cuda::launch_scatter_unpack(g[l].data(), n, ws[l], recv[l].data(), out.data(),
                                                              stream) == cudaSuccess;
        continue;
      }
      // As the NCCL executor: the tensors without replicated heads in one launch, then each summed one.
      std::vector<Geometry> plain = g[l];
      std::vector<void*> out(static_cast<size_t>(n), nullptr);
      for (int32_t t = 0; t < n; ++t) {
        if (g[l][t].replicated()) {
          plain[t].b_loc = 0;
        } else {
          out[t] = back[l][t].data();
        }
      }
      launched &= basp::layout::cuda::launch_gather_unpack(plain.data(), n, ws[l], recv[l].data(), out.data(),
                                                           stream) == cudaSuccess;
      for (int32_t t = 0; t < n; ++t) {
        if (!g[l][t].replicated()) continue;
        basp::layout::SumUnpackArgs a;
        a.geom = g[l][t];
        a.tensor = t;
        a.dtype = dtype;
        a.seq = reinterpret_cast<unsigned char*>(back[l][t].data());
        a.wire = reinterpret_cast<const unsigned char*>(recv[l].data());
        a.workspace = ws[l];
        launched &= basp::layout::cuda::launch_sum_unpack(a, stream) == cudaSuccess;
      }
    }
    TEST_CUDA(cudaStreamSynchronize(stream));
  };
  exchange(true);
  for (int32_t t = 0; t < n; ++t) {
    const Geometry& bt = base[t];
    int64_t wrong = 0;
    for (int64_t m = 0; m < k; ++m) {
      const std::vector<std::byte> got = head[m][t].download();
      for (int64_t b = 0; b < bt.b_loc; ++b)
        for (int64_t s = 0; s < bt.seq_len; ++s)
          for (int64_t i = 0; i < ref[t].hc(m); ++i)
            for (int64_t d = 0; d < bt.head_dim; ++d)
              for (int64_t e = 0; e < bt.elem; ++e)
                wrong += got[ref[t].head_index(m, b, s, i, d) * bt.elem + e] !=
                         std::byte{basp::test::pattern_byte(kSeed, t, b, s, ref[t].heads[m].begin + i, d, e)};
    }
    if (!tally.check(wrong == 0, name))
      std::printf("  scatter: tensor %d: %lld bytes wrong\n", t, static_cast<long long>(wrong));
  }
  // Random finite values as every holder's contribution to a replicated tensor: sums that round.
  for (int32_t t = 0; t < n; ++t) {
    for (int64_t m = 0; m < k; ++m) {
      head_host[m].emplace_back();
      if (!base[t].replicated()) continue;
      auto& h = head_host[m][t];
      h.resize(static_cast<size_t>(g[m][t].head_tensor_bytes(m)));
      for (size_t i = 0; i < h.size(); i += static_cast<size_t>(base[t].elem)) {
        const float v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
        if (dtype == BASP_DTYPE_FP16) {
          const uint16_t x = basp::layout::float_to_half(v);
          std::memcpy(&h[i], &x, 2);
        } else if (dtype == BASP_DTYPE_BF16) {
          const uint16_t x = basp::layout::float_to_bf16(v);
          std::memcpy(&h[i], &x, 2);
        } else if (dtype == BASP_DTYPE_FP32) {
          std::memcpy(&h[i], &v, 4);
        } else {
          const double x = v;
          std::memcpy(&h[i], &x, 8);
        }
      }
      head[m][t].upload(h);
    }
  }
  exchange(false);
  for (int64_t l = 0; l < k; ++l) {
    for (int32_t t = 0; t < n; ++t) {
      const std::vector<std::byte> got = back[l][t].download();
      std::vector<std::byte> want = seq_host[l][t];
      if (base[t].replicated()) {
        std::vector<basp::layout::RowPlace> places(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) places[j] = {head_host[j][t].data(), true};
        basp::layout::gather_rows(g[l][t], places.data(), want.data(), dtype, false);
      }
      const int64_t diff = basp::test::first_difference(got, want);
      if (!tally.check(diff < 0, name))
        std::printf("  gather: rank %lld tensor %d first wrong byte %lld\n", static_cast<long long>(l), t,
                    static_cast<long long>(diff));
    }
  }
  tally.check(launched, name);
  TEST_CUDA(cudaStreamDestroy(stream));
  std::printf("%s: %s\n", name, tally.failures == 0 ? "ok" : "FAILED so far");
}

Geometry general_geometry(int32_t layout, int64_t k, int64_t b_loc, int64_t seq_len, int64_t heads, int64_t split_heads,
                          int64_t head_dim, int64_t elem) {
  Geometry g;
  g.layout = layout;
  g.k = k;
  g.b_loc = b_loc;
  g.seq_len = seq_len;
  g.heads = heads;
  g.split_heads = split_heads;
  g.head_dim = head_dim;
  g.elem = elem;
  return g;
}

#if BASP_HAVE_NCCL
// Several ranks on one GPU: NCCL's answer is reported, not judged. When it accepts, a real K = 2 exchange
// runs through the public C ABI (one thread per rank) and is checked like the loopback.
void nccl_several_ranks_one_gpu(basp::test::Tally& tally) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  const int devices[2] = {0, 0};
  const ncclResult_t rc = ncclCommInitAll(comms, 2, devices);
  if (rc != ncclSuccess) {
    const char* detail = ncclGetLastError(nullptr);
    std::printf("NCCL with 2 ranks on one GPU: REFUSED by NCCL: %s%s%s\n", ncclGetErrorString(rc),
                detail != nullptr && detail[0] != '\0' ? ": " : "", detail != nullptr ? detail : "");
    return;
  }
  std::printf("NCCL with 2 ranks on one GPU: accepted; running a K = 2 exchange through the C ABI\n");
  const Geometry g = basp::test::geometries({2, 1, 8, 64, {4}}, BASP_LAYOUT_BSHD, 2)[0];
  bool ok[2] = {false, false};
  std::string errors[2];
  auto rank_main = [&](int l) {
    TEST_CUDA(cudaSetDevice(0));
    basp_comm_config_t config = BASP_COMM_CONFIG_INITIALIZER;
    config.micro_batch = 1;
    config.backend = BASP_BACKEND_NCCL;
    basp_comm_t comm = nullptr;
    basp_plan_t plan = nullptr;
    if (basp_comm_create_nccl(comms[l], &config, &comm) != BASP_SUCCESS) {
      errors[l] = basp_last_error();
      return;
    }
    basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
    desc.layout = BASP_LAYOUT_BSHD;
    desc.dtype = BASP_DTYPE_BF16;
    desc.seq_len = basp::test::s_loc(g) * 2;
    desc.head_dim = g.head_dim;
    desc.num_tensors = 1;
    desc.num_heads[0] = g.heads;
    if (basp_plan_create(comm, &desc, &plan) != BASP_SUCCESS) {
      errors[l] = basp_last_error();
      basp_comm_destroy(comm);
      return;
    }
    DeviceBytes seq(g.seq_tensor_bytes(0)), head(g.seq_tensor_bytes(0)), back(g.seq_tensor_bytes(0));
    seq.upload(seq_input(g, 0, l));
    head.fill(kPoison);
    back.fill(kPoison);
    cudaStream_t stream = nullptr;
    TEST_CUDA(cudaStreamCreate(&stream));
    const void* in[1] = {seq.data()};
    void* out[1] = {head.data()};
    const void* hin[1] = {head.data()};
    void* hout[1] = {back.data()};
    if (basp_scatter(plan, in, out, stream) != BASP_SUCCESS || basp_gather(plan, hin, hout, stream) != BASP_SUCCESS) {
      errors[l] = basp_last_error();
    } else {
      TEST_CUDA(cudaStreamSynchronize(stream));
      ok[l] = basp::test::first_difference(head.download(), head_expected(g, 0, l)) < 0 &&
              basp::test::first_difference(back.download(), seq_input(g, 0, l)) < 0;
    }
    TEST_CUDA(cudaStreamDestroy(stream));
    basp_plan_destroy(plan);
    basp_comm_destroy(comm);
  };
  std::thread r0(rank_main, 0), r1(rank_main, 1);
  r0.join();
  r1.join();
  for (int l = 0; l < 2; ++l) {
    if (!errors[l].empty()) std::printf("  rank %d: %s\n", l, errors[l].c_str());
    tally.check(ok[l], "NCCL K = 2 on one GPU through the C ABI");
  }
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
}
#endif

}  // namespace

int main() {
  const char* program = "test_gpu_loopback";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  basp::test::Tally tally;
  for (int64_t k : {2, 3, 4, 8}) {
    const basp::test::Shape shape{k, 2, 16, 72, {2 * k, k, k}};
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD})
      for (int64_t elem : {1, 2, 4, 8}) loopback_case(shape, layout, elem, tally);
  }
  // Multi-head latent attention through the uniform path: Q, K at 192, V at 128, 16 heads each, K = 2 and 8.
  for (int64_t k : {2, 8}) {
    const basp::test::Shape mla{k, 1, 3, 128, {16, 16, 16}, {192, 192, 128}};
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) loopback_case(mla, layout, 2, tally);
  }
  // The general path: Qwen2.5-7B's 28/4 heads at K = 8 (replicated KV heads), MQA, uneven heads and tokens, THD.
  using basp::layout::Geometry;
  general_case({general_geometry(BASP_LAYOUT_BSHD, 8, 2, 19, 4, 28, 128, 2)}, BASP_DTYPE_BF16, tally);
  general_case({general_geometry(BASP_LAYOUT_SBHD, 8, 1, 33, 4, 28, 72, 2)}, BASP_DTYPE_FP16, tally);
  general_case({general_geometry(BASP_LAYOUT_THD, 4, 1, 1001, 1, 8, 64, 4)}, BASP_DTYPE_FP32, tally);
  general_case({general_geometry(BASP_LAYOUT_BSHD, 3, 2, 17, 5, 5, 64, 8)}, BASP_DTYPE_FP64, tally);
  general_case({general_geometry(BASP_LAYOUT_THD, 8, 1, 5, 12, 12, 128, 2)}, BASP_DTYPE_BF16, tally);  // T < K
  // Multi-head latent attention in one exchange: Q, K at 192 and V at 128 (Hkv = Hq), and the rotary key, one head
  // of 64 shared by every query head, so held by every rank and summed by the gather; S not divisible by K.
  // DeepSeek-V2-Lite's 16 heads at K = 8 (BSHD, BF16) and DeepSeek-V3's 128 at K = 8 (SBHD, FP32).
  for (const auto& [layout, heads, dtype, elem] :
       {std::tuple<int32_t, int64_t, int32_t, int64_t>{BASP_LAYOUT_BSHD, 16, BASP_DTYPE_BF16, 2},
        std::tuple<int32_t, int64_t, int32_t, int64_t>{BASP_LAYOUT_SBHD, 128, BASP_DTYPE_FP32, 4}}) {
    general_case({general_geometry(layout, 8, 1, 11, heads, heads, 192, elem),
                  general_geometry(layout, 8, 1, 11, heads, heads, 192, elem),
                  general_geometry(layout, 8, 1, 11, heads, heads, 128, elem),
                  general_geometry(layout, 8, 1, 11, 1, heads, 64, elem)},
                 dtype, tally);
  }
#if BASP_HAVE_NCCL
  nccl_several_ranks_one_gpu(tally);
#else
  std::printf("NCCL with several ranks on one GPU: not tried (built without NCCL)\n");
#endif
  return tally.finish(program);
}
