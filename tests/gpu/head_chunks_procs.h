// Part 9 of test_gpu_nccl_procs (test_nccl_threads.cpp built with BASP_TEST_PROCESSES=1): split-phase head chunks
// through the C ABI across processes, on the NCCL backend (docs/overlap.md). NOT yet run on a GPU.
//
// A plan whose key/value head every rank holds (Q of 2N + 1 heads, K and V of one head serving them, N ranks:
// uneven heads, uneven tokens S = 2N + 1, GQA with held heads, so the gather sums them), FP32 data that is a
// function of the global coordinates (small integers: every sum exact). For C in 1, 2 and max_head_chunks: every
// scatter chunk started in order on the caller's stream, basp_scatter_test polled until each says done, the waits
// in reverse order; then the gather's chunks the same way; outputs poisoned first; the scatter's output against the
// coordinates, the gather's against the sums over the heads' holders, written out here (split_reference.h). Last,
// a plan destroyed with a round of chunks started and not waited for: they end, the destroy succeeds.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "gpu_threads.h"
#include "gpu_util.h"
#include "layout/geometry.h"
#include "pattern.h"
#include "split_reference.h"

namespace basp::test {

// The value of element (b, global token s, head h, d) of tensor t: on the sequence side (holder -1), or holder m's
// contribution to the gather.
inline int32_t chunk_value(int t, int64_t holder, int64_t b, int64_t s, int64_t h, int64_t d) {
  return static_cast<int32_t>(pattern_byte(4242, t, holder + 1, b * 1000 + s, h, d, 0) % 61) - 30;
}

struct ChunkCase {
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  std::vector<GeometryRef<layout::Geometry>> ref;  // per tensor
  std::vector<DeviceBytes> seq, head, back;
  std::vector<std::vector<std::byte>> seq_host, head_host;
  const void* in[3] = {};
  void* mid[3] = {};
  const void* mid_in[3] = {};
  void* out[3] = {};
};

inline void make_chunk_case(ChunkCase& c, int l, int n) {
  c.desc.layout = BASP_LAYOUT_BSHD;
  c.desc.dtype = BASP_DTYPE_FP32;
  c.desc.seq_len = 2 * n + 1;
  c.desc.head_dim = 8;
  c.desc.num_tensors = 3;
  const int64_t hq = 2 * n + 1;
  c.desc.num_heads[0] = hq;
  for (int t = 1; t < 3; ++t) {
    c.desc.num_heads[t] = 1;
    c.desc.query_heads[t] = hq;
  }
  for (int t = 0; t < 3; ++t) {
    layout::Geometry g;
    g.layout = BASP_LAYOUT_BSHD;
    g.b_loc = 2;  // micro_batch 2, one group
    g.seq_len = c.desc.seq_len;
    g.k = n;
    g.heads = c.desc.num_heads[t];
    g.split_heads = hq;
    g.head_dim = c.desc.head_dim;
    g.elem = 4;
    c.ref.emplace_back(g);
    const GeometryRef<layout::Geometry>& r = c.ref.back();
    std::vector<std::byte> s(static_cast<size_t>(r.seq_bytes(l))), h(static_cast<size_t>(r.head_bytes(l)));
    for (int64_t b = 0; b < g.b_loc; ++b)
      for (int64_t tok = 0; tok < g.seq_len; ++tok)
        for (int64_t d = 0; d < g.head_dim; ++d) {
          for (int64_t hh = 0; hh < g.heads && r.tok[l] <= tok && tok < r.tok[l + 1]; ++hh)
            write_small_int(BASP_DTYPE_FP32, s.data() + r.seq_index(l, b, tok - r.tok[l], hh, d) * 4,
                            chunk_value(t, -1, b, tok, hh, d));
          for (int64_t i = 0; i < r.hc(l); ++i)
            write_small_int(BASP_DTYPE_FP32, h.data() + r.head_index(l, b, tok, i, d) * 4,
                            chunk_value(t, l, b, tok, r.heads[l].begin + i, d));
        }
    c.seq.emplace_back(static_cast<int64_t>(s.size()));
    c.head.emplace_back(static_cast<int64_t>(h.size()));
    c.back.emplace_back(static_cast<int64_t>(s.size()));
    c.seq[t].upload(s);
    c.seq_host.push_back(std::move(s));
    c.head_host.push_back(std::move(h));
  }
  for (int t = 0; t < 3; ++t) {
    c.in[t] = c.seq[t].data();
    c.mid[t] = c.head[t].data();
    c.mid_in[t] = c.head[t].data();
    c.out[t] = c.back[t].data();
  }
}

// What rank l must hold after the scatter (every token of its heads) and after the gather of the contributions
// (every head of its tokens: the sum over the head's holders, in FP32, exact).
inline std::vector<std::byte> chunk_scatter_expected(const ChunkCase& c, int t, int l) {
  const GeometryRef<layout::Geometry>& r = c.ref[static_cast<size_t>(t)];
  std::vector<std::byte> v(static_cast<size_t>(r.head_bytes(l)));
  for (int64_t b = 0; b < r.g.b_loc; ++b)
    for (int64_t tok = 0; tok < r.g.seq_len; ++tok)
      for (int64_t i = 0; i < r.hc(l); ++i)
        for (int64_t d = 0; d < r.g.head_dim; ++d)
          write_small_int(BASP_DTYPE_FP32, v.data() + r.head_index(l, b, tok, i, d) * 4,
                          chunk_value(t, -1, b, tok, r.heads[l].begin + i, d));
  return v;
}

inline std::vector<std::byte> chunk_gather_expected(const ChunkCase& c, int t, int l, int n) {
  const GeometryRef<layout::Geometry>& r = c.ref[static_cast<size_t>(t)];
  std::vector<std::byte> v(static_cast<size_t>(r.seq_bytes(l)));
  for (int64_t b = 0; b < r.g.b_loc; ++b)
    for (int64_t s = 0; s < r.tc(l); ++s)
      for (int64_t h = 0; h < r.g.heads; ++h)
        for (int64_t d = 0; d < r.g.head_dim; ++d) {
          int32_t sum = 0;
          for (int m = 0; m < n; ++m) {
            if (r.heads[static_cast<size_t>(m)].holds(h)) sum += chunk_value(t, m, b, r.tok[l] + s, h, d);
          }
          write_small_int(BASP_DTYPE_FP32, v.data() + r.seq_index(l, b, s, h, d) * 4, sum);
        }
  return v;
}

// One round of `count` chunks of a scatter (else a gather): started in order, tested until done, waited in
// reverse.
inline bool chunk_round(basp_plan_t plan, const ChunkCase& c, int32_t count, bool scatter, cudaStream_t stream,
                        std::string& why) {
  {
    for (int32_t k = 0; k < count; ++k) {
      const basp_status_t rc = scatter ? basp_scatter_start(plan, k, count, -1, c.in, c.mid, stream)
                                       : basp_gather_start(plan, k, count, -1, c.mid_in, c.out, stream);
      if (rc != BASP_SUCCESS) return why = std::string("start: ") + basp_last_error(), false;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int32_t k = 0; k < count; ++k) {
      int32_t done = 0;
      while (done == 0 && std::chrono::steady_clock::now() < until) {
        const basp_status_t rc = scatter ? basp_scatter_test(plan, k, &done) : basp_gather_test(plan, k, &done);
        if (rc != BASP_SUCCESS) return why = std::string("test: ") + basp_last_error(), false;
        if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (done == 0) return why = "test: chunk " + std::to_string(k) + " not done after 30 s", false;
    }
    for (int32_t k = count - 1; k >= 0; --k) {
      const basp_status_t rc = scatter ? basp_scatter_wait(plan, k) : basp_gather_wait(plan, k);
      if (rc != BASP_SUCCESS) return why = std::string("wait: ") + basp_last_error(), false;
    }
  }
  return true;
}

inline void head_chunks_procs(basp_comm_t comm, int l, int n, Failures& out, Barrier& barrier) {
  ChunkCase c;
  make_chunk_case(c, l, n);
  basp_plan_t plan = nullptr;
  const basp_status_t made = basp_plan_create(comm, &c.desc, &plan);
  out.check(made == BASP_SUCCESS, l, std::string("chunks: plan create: ") + (made ? basp_last_error() : ""));
  if (!barrier.all(made == BASP_SUCCESS)) return;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(plan, &info);
  out.check(info.replicated == 1, l, "chunks: the plan's KV head is held by several ranks");
  cudaStream_t stream = nullptr;
  TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const int32_t count : {1, 2, info.max_head_chunks}) {
    const std::string name = "chunks: C " + std::to_string(count) + " of " + std::to_string(info.max_head_chunks);
    for (int t = 0; t < 3; ++t) {
      c.head[t].upload(std::vector<std::byte>(c.head_host[t].size(), std::byte{kPoison}));
      c.back[t].fill(kPoison);
    }
    TEST_CUDA(cudaDeviceSynchronize());
    barrier.wait();
    std::string why;
    bool ok = chunk_round(plan, c, count, true, stream, why);
    TEST_CUDA(cudaStreamSynchronize(stream));
    out.check(ok, l, name + ": " + why);
    for (int t = 0; t < 3 && ok; ++t) {
      const int64_t h = first_difference(c.head[t].download(), chunk_scatter_expected(c, t, l));
      out.check(h < 0, l,
                name + ": scatter of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(h));
    }
    // The gather of the contributions: the head-sharded inputs replaced by each holder's own values.
    for (int t = 0; t < 3; ++t) {
      c.head[t].upload(c.head_host[t]);
      c.back[t].fill(kPoison);
    }
    TEST_CUDA(cudaDeviceSynchronize());
    barrier.wait();
    ok = chunk_round(plan, c, count, false, stream, why);
    TEST_CUDA(cudaStreamSynchronize(stream));
    out.check(ok, l, name + " (contributions): " + why);
    for (int t = 0; t < 3 && ok; ++t) {
      const int64_t s = first_difference(c.back[t].download(), chunk_gather_expected(c, t, l, n));
      out.check(s < 0, l,
                name + ": summing gather of tensor " + std::to_string(t) + ": first wrong byte " + std::to_string(s));
    }
    barrier.wait();
  }
  // Destroyed with a scatter round in flight: the chunks end, the destroy waits for them and succeeds.
  bool started = true;
  for (int32_t k = 0; k < 2; ++k) started = started && basp_scatter_start(plan, k, 2, -1, c.in, c.mid, stream) == 0;
  out.check(started, l, std::string("chunks: start before destroy: ") + (started ? "" : basp_last_error()));
  const basp_status_t destroyed = basp_plan_destroy(plan);
  out.check(destroyed == BASP_SUCCESS, l,
            std::string("chunks: destroy with chunks in flight that end: ") + (destroyed ? basp_last_error() : ""));
  TEST_CUDA(cudaStreamSynchronize(stream));
  TEST_CUDA(cudaStreamDestroy(stream));
  barrier.wait();
}

}  // namespace basp::test
