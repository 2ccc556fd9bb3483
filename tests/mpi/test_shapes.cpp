// Property test of the general exchange under mpirun, through the C ABI: every trial draws a shape that
// the textbook plan refused (S and head counts the group size does not divide, S < K, prime S, GQA and MQA with
// fewer KV heads than ranks, K/V-only plans, packed THD streams whose token count changes every call), every
// layout and dtype, from a seed that rank 0 prints. Inputs are a function of global (tensor, sequence, token, head,
// dim, byte); outputs are poisoned; the splits and the routing come from tests/common/split_reference.h, not from
// the library. Checked per trial:
//   - the plan info (shapes, head, split and token ranges, bytes_sent = the routing minimum) against the formulas;
//   - the scatter output bit for bit;
//   - the gather: the exact inverse where no head is replicated; where heads are replicated, the sum of every
//     holder's contribution (small integers, exact in every summable type), or BASP_ERROR_UNSUPPORTED for a type
//     that cannot be summed;
//   - a THD call whose token count differs on one rank fails on every rank with BASP_ERROR_MISMATCH naming the
//     counts, and the plan works afterwards.
// The path is the one BASP_MPI_TRANSPORT forces (CMake runs every path); with "shared" the head-sharded tensors
// live in basp_mem_alloc memory and the shared path must be the one taken.
//
// Built with BASP_TEST_DEVICE=1 it is test_gpu_shapes: the same trials on the NCCL backend (basp_comm_create_mpi
// with backend NCCL, one process per rank, any number of ranks per GPU under scripts/gpu/rank-env), every call's
// tensors copied to device memory (outputs with their poison) and back; the THD mismatch probe with
// BASP_CHECK_EXCHANGES=1, which NCCL executes need to agree before they move data. Skipped (77) without a device.
//
// usage: test_shapes [trials] [seed] [shared]
#include <mpi.h>
#if BASP_TEST_DEVICE
#include <cuda_runtime_api.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "basp/basp.h"
#include "pattern.h"
#include "split_reference.h"

using basp::test::HeadRange;
using basp::test::kPoison;
using basp::test::pattern_byte;
using basp::test::split_bounds;

namespace {

int g_rank = 0;
int g_size = 1;
bool g_shared = false;
int32_t g_forced_path = -1;

struct Failure {
  std::string what;
};

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      char buf_[512];                                                                  \
      std::snprintf(buf_, sizeof buf_, __VA_ARGS__);                                   \
      std::fprintf(stderr, "rank %d: %s (%s:%d)\n", g_rank, buf_, __FILE__, __LINE__); \
      ++failures;                                                                      \
    }                                                                                  \
  } while (0)

bool summable(int32_t dtype) {
  return dtype == BASP_DTYPE_FP16 || dtype == BASP_DTYPE_BF16 || dtype == BASP_DTYPE_FP32 || dtype == BASP_DTYPE_FP64;
}

struct Shape {
  int32_t num_groups = 1;
  int64_t micro_batch = 1;
  int32_t layout = BASP_LAYOUT_BSHD;
  int32_t dtype = BASP_DTYPE_BYTE;
  int64_t seq_len = 1;  // THD: the capacity
  int64_t head_dim = 1;
  std::vector<int64_t> heads, split;  // per tensor: its heads, the heads whose split it follows
  std::vector<int64_t> calls;         // THD: the token count of each call
  std::vector<int64_t> dims;          // per tensor: its own head size (head_dims[t]), 0: head_dim; empty: none
  bool head_dim_unset = false;        // head_dim left at -1: every tensor sets its own

  int64_t dim(size_t t) const { return dims.empty() || dims[t] == 0 ? head_dim : dims[t]; }
};

// One tensor of one call, seen by the test: tokens split over K, this tensor's per-position heads.
struct TensorRef {
  int64_t b_loc, S, H, D, elem;
  bool sbhd;
  std::vector<int64_t> tok;
  std::vector<HeadRange> heads;
  int64_t tc(int64_t l) const { return tok[l + 1] - tok[l]; }
  int64_t hc(int64_t m) const { return heads[m].end - heads[m].begin; }
  int64_t seq_elems(int64_t l) const { return b_loc * tc(l) * H * D; }
  int64_t head_elems(int64_t m) const { return b_loc * S * hc(m) * D; }
  int64_t seq_index(int64_t l, int64_t b, int64_t s, int64_t h, int64_t d) const {
    return ((sbhd ? s * b_loc + b : b * tc(l) + s) * H + h) * D + d;
  }
  int64_t head_index(int64_t m, int64_t b, int64_t s, int64_t i, int64_t d) const {
    return ((sbhd ? s * b_loc + b : b * S + s) * hc(m) + i) * D + d;
  }
};

int32_t contribution(uint64_t seed, int64_t m, int64_t b, int64_t s, int64_t h, int64_t d) {
  return static_cast<int32_t>(pattern_byte(seed, 99, m, b, s, h, d) % 17) - 8;
}

Shape draw(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Shape sh;
  std::vector<int32_t> divisors;
  for (int32_t g = 1; g <= g_size; ++g) {
    if (g_size % g == 0) divisors.push_back(g);
  }
  sh.num_groups = divisors[static_cast<size_t>(pick(0, static_cast<int64_t>(divisors.size()) - 1))];
  const int64_t k = g_size / sh.num_groups;
  sh.layout = static_cast<int32_t>(pick(0, 2));
  sh.micro_batch = sh.layout == BASP_LAYOUT_THD ? sh.num_groups : sh.num_groups * pick(1, 2);
  sh.dtype = static_cast<int32_t>(pick(0, BASP_DTYPE_UNSET - 1));
  const int64_t dims[] = {1, 3, 72, 128};
  sh.head_dim = dims[pick(0, 3)];
  const int64_t primes[] = {2, 3, 5, 7, 11, 13};
  const int64_t max_seq = sh.head_dim >= 72 ? 2 * k + 3 : 4 * k + 5;
  sh.seq_len = pick(0, 3) == 0 ? primes[pick(0, 5)] : pick(1, max_seq);  // also S < K
  const int64_t hq = pick(1, 2 * k + 3);
  std::vector<int64_t> kv_choices;
  for (int64_t h = 1; h <= hq; ++h) {
    if (hq % h == 0) kv_choices.push_back(h);
  }
  const int64_t hkv =
      pick(0, 2) == 0 ? 1 : kv_choices[static_cast<size_t>(pick(0, static_cast<int64_t>(kv_choices.size()) - 1))];
  switch (pick(0, 3)) {
    case 0:  // Q, K, V
      sh.heads = {hq, hkv, hkv};
      sh.split = {hq, hq, hq};
      break;
    case 1:  // dK, dV only: the KV tensors still follow the query split
      sh.heads = {hkv, hkv};
      sh.split = {hq, hq};
      break;
    case 2:  // the attention output alone
      sh.heads = {hq};
      sh.split = {hq};
      break;
    default:  // KV heads exchanged as query-like tensors of their own
      sh.heads = {hq, hkv};
      sh.split = {hq, hkv};
      break;
  }
  if (sh.layout == BASP_LAYOUT_THD) {
    sh.seq_len = pick(1, 6 * k + 7);  // the capacity
    const int64_t ncalls = pick(2, 3);
    for (int64_t c = 0; c < ncalls; ++c) sh.calls.push_back(c == 0 ? sh.seq_len : pick(0, sh.seq_len));
  }
  return sh;
}

// Per-tensor head sizes for some trials, from their own generator (the shapes drawn before stay as they were): 1
// and rows that are not multiples of 16 bytes among them; head_dim sometimes unset when every tensor sets its own.
Shape with_dims(Shape sh, std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  if (pick(0, 2) != 0) return sh;
  const int64_t sizes[] = {0, 1, 3, 5, 12, 40};
  bool all = true;
  for (size_t t = 0; t < sh.heads.size(); ++t) {
    sh.dims.push_back(sizes[pick(0, 5)]);
    all = all && sh.dims.back() > 0;
  }
  sh.head_dim_unset = all && pick(0, 1) == 0;
  return sh;
}

void describe(const Shape& sh, char* out, size_t n) {
  std::string heads;
  for (size_t t = 0; t < sh.heads.size(); ++t) {
    heads += (t ? "," : "") + std::to_string(sh.heads[t]) + "/" + std::to_string(sh.split[t]);
    if (!sh.dims.empty()) heads += "x" + std::to_string(sh.dim(t));
  }
  std::snprintf(out, n, "G %d B %lld layout %d dtype %d S %lld D %lld%s heads %s", sh.num_groups,
                static_cast<long long>(sh.micro_batch), sh.layout, sh.dtype, static_cast<long long>(sh.seq_len),
                static_cast<long long>(sh.head_dim), sh.head_dim_unset ? " (unset)" : "", heads.c_str());
}

// Host memory for a head-sharded tensor: a vector, or basp_mem_alloc memory (collective: every rank allocates the
// same number of them, at least 64 bytes).
struct HeadBuffer {
  basp_comm_t comm = nullptr;
  uint8_t* ptr = nullptr;
  size_t size = 0;
  std::vector<uint8_t> own;
  HeadBuffer(basp_comm_t c, size_t bytes) : size(bytes + 1) {
    if (!g_shared) {
      own.assign(bytes + 1, kPoison);
      ptr = own.data();
      return;
    }
    void* p = nullptr;
    if (basp_mem_alloc(c, bytes + 64, &p) != BASP_SUCCESS) {
      std::fprintf(stderr, "rank %d: basp_mem_alloc: %s\n", g_rank, basp_last_error());
      std::abort();
    }
    comm = c;
    ptr = static_cast<uint8_t*>(p);
  }
  HeadBuffer(const HeadBuffer&) = delete;
  HeadBuffer& operator=(const HeadBuffer&) = delete;
  ~HeadBuffer() {
    if (comm) basp_mem_free(comm, ptr);
  }
};

// One scatter or gather of `tokens` (-1: the plan's S). Host memory on the MPI backend; with BASP_TEST_DEVICE, the
// tensors go to fresh device buffers (outputs with the poison they hold), the call runs on a stream, and the outputs
// come back, so that the checks read host memory either way. A NULL pointer stays NULL.
struct Tensors {
  std::vector<const void*> in;
  std::vector<size_t> in_bytes;
  std::vector<void*> out;
  std::vector<size_t> out_bytes;
};

basp_status_t call(bool scatter, basp_plan_t plan, int64_t tokens, const Tensors& x) {
#if BASP_TEST_DEVICE
  static cudaStream_t stream = nullptr;
  if (stream == nullptr && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) std::abort();
  const size_t n = x.in.size();
  std::vector<void*> din(n, nullptr), dout(n, nullptr);
  const auto check = [](cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) {
      std::fprintf(stderr, "rank %d: FATAL: %s: %s\n", g_rank, what, cudaGetErrorString(rc));
      std::abort();
    }
  };
  for (size_t t = 0; t < n; ++t) {
    if (x.in[t] != nullptr) {
      check(cudaMalloc(&din[t], x.in_bytes[t]), "cudaMalloc");
      check(cudaMemcpy(din[t], x.in[t], x.in_bytes[t], cudaMemcpyHostToDevice), "cudaMemcpy in");
    }
    if (x.out[t] != nullptr) {
      check(cudaMalloc(&dout[t], x.out_bytes[t]), "cudaMalloc");
      check(cudaMemcpy(dout[t], x.out[t], x.out_bytes[t], cudaMemcpyHostToDevice), "cudaMemcpy poison");
    }
  }
  const basp_status_t st = scatter ? basp_scatter_tokens(plan, tokens, din.data(), dout.data(), stream)
                                   : basp_gather_tokens(plan, tokens, din.data(), dout.data(), stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // basp_last_error() stays this call's
  for (size_t t = 0; t < n; ++t) {
    if (x.out[t] != nullptr) {
      check(cudaMemcpy(x.out[t], dout[t], x.out_bytes[t], cudaMemcpyDeviceToHost), "cudaMemcpy out");
    }
    cudaFree(din[t]);
    cudaFree(dout[t]);
  }
  return st;
#else
  return scatter ? basp_scatter_tokens(plan, tokens, x.in.data(), x.out.data(), nullptr)
                 : basp_gather_tokens(plan, tokens, x.in.data(), x.out.data(), nullptr);
#endif
}

int run_trial(const Shape& sh, uint64_t seed, bool mismatch_probe) {
  int failures = 0;
  char label[256];
  describe(sh, label, sizeof label);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = sh.micro_batch;
  cfg.num_groups = sh.num_groups;
  cfg.placement = BASP_PLACEMENT_CONTIGUOUS;
#if BASP_TEST_DEVICE
  cfg.backend = BASP_BACKEND_NCCL;
#endif
  basp_comm_t comm = nullptr;
  if (basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) != BASP_SUCCESS) {
    std::fprintf(stderr, "rank %d: comm: %s\n", g_rank, basp_last_error());
    return 1;
  }
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  basp_comm_query(comm, -1, 0, &me);
  const int64_t k = me.group_size;
  const int64_t l = me.group_position;
  const bool thd = sh.layout == BASP_LAYOUT_THD;
  const int64_t b_loc = thd ? 1 : me.num_sequences;
  const int64_t first_seq = thd ? me.group_index : me.first_sequence;
  const auto n = static_cast<int32_t>(sh.heads.size());
  const int64_t elem = static_cast<int64_t>(basp_dtype_size(static_cast<basp_dtype_t>(sh.dtype)));

  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.layout = sh.layout;
  desc.dtype = sh.dtype;
  desc.seq_len = thd ? -1 : sh.seq_len;
  desc.token_capacity = thd ? sh.seq_len : 0;
  desc.head_dim = sh.head_dim_unset ? -1 : sh.head_dim;
  desc.num_tensors = n;
  for (int32_t t = 0; t < n; ++t) {
    desc.num_heads[t] = sh.heads[t];
    desc.query_heads[t] = sh.split[t] == sh.heads[t] ? 0 : sh.split[t];
    desc.head_dims[t] = sh.dims.empty() ? 0 : sh.dims[static_cast<size_t>(t)];
  }
  basp_plan_t plan = nullptr;
  if (basp_plan_create(comm, &desc, &plan) != BASP_SUCCESS) {
    std::fprintf(stderr, "rank %d: plan (%s): %s\n", g_rank, label, basp_last_error());
    basp_comm_destroy(comm);
    return 1;
  }

  // The plan info against the formulas, at the plan's S (THD: its capacity).
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(plan, &info);
  bool replicated = false;
  int64_t bytes_sent = 0;
  std::vector<TensorRef> refs;
  for (int32_t t = 0; t < n; ++t) {
    TensorRef r{b_loc,
                sh.seq_len,
                sh.heads[t],
                sh.dim(static_cast<size_t>(t)),
                elem,
                sh.layout == BASP_LAYOUT_SBHD,
                split_bounds(sh.seq_len, k),
                basp::test::head_ranges(sh.heads[t], sh.split[t], k)};
    for (int64_t h = 0; h < r.H; ++h) {
      int holders = 0;
      for (int64_t m = 0; m < k; ++m) holders += r.heads[m].holds(h) ? 1 : 0;
      replicated = replicated || holders > 1;
    }
    int64_t others = 0;
    for (int64_t m = 0; m < k; ++m) others += m == l ? 0 : r.hc(m);
    bytes_sent += b_loc * r.tc(l) * others * r.D * elem;
    const std::vector<int64_t> q = split_bounds(sh.split[t], k);
    EXPECT(info.head_begin[t] == r.heads[l].begin && info.head_end[t] == r.heads[l].end,
           "%s: tensor %d heads [%lld, %lld), expected [%lld, %lld)", label, t,
           static_cast<long long>(info.head_begin[t]), static_cast<long long>(info.head_end[t]),
           static_cast<long long>(r.heads[l].begin), static_cast<long long>(r.heads[l].end));
    EXPECT(info.split_begin[t] == q[l] && info.split_end[t] == q[l + 1], "%s: tensor %d split range", label, t);
    EXPECT(info.seq_sharded_elems[t] == r.seq_elems(l), "%s: tensor %d seq_sharded_elems %lld, expected %lld", label, t,
           static_cast<long long>(info.seq_sharded_elems[t]), static_cast<long long>(r.seq_elems(l)));
    EXPECT(info.head_sharded_elems[t] == r.head_elems(l), "%s: tensor %d head_sharded_elems", label, t);
    refs.push_back(r);
  }
  EXPECT(info.bytes_sent_per_exchange == bytes_sent, "%s: bytes_sent %lld, expected %lld", label,
         static_cast<long long>(info.bytes_sent_per_exchange), static_cast<long long>(bytes_sent));
  EXPECT(info.replicated == (replicated ? 1 : 0), "%s: replicated %d", label, info.replicated);
  EXPECT(info.token_begin == refs[0].tok[l] && info.token_end == refs[0].tok[l + 1], "%s: token range", label);
  EXPECT(info.ndim == (thd ? 3 : 4), "%s: ndim %d", label, info.ndim);
  EXPECT(info.token_capacity == (thd ? sh.seq_len : 0), "%s: token_capacity", label);

  // Buffers at the plan's size; each call uses a prefix.
  std::vector<std::vector<uint8_t>> in(n), back(n);
  std::vector<std::unique_ptr<HeadBuffer>> mid(n);
  for (int32_t t = 0; t < n; ++t) {
    in[t].resize(static_cast<size_t>(refs[t].seq_elems(l) * elem) + 1);
    back[t].resize(in[t].size());
    mid[t] = std::make_unique<HeadBuffer>(comm, static_cast<size_t>(refs[t].head_elems(l) * elem));
  }
  const std::vector<int64_t> calls = thd ? sh.calls : std::vector<int64_t>{sh.seq_len};
  for (size_t c = 0; c < calls.size(); ++c) {
    const int64_t T = calls[c];
    const uint64_t cseed = seed + c;
    std::vector<TensorRef> cr;
    std::vector<const void*> in_ptr(n), mid_cptr(n);
    std::vector<void*> mid_ptr(n), back_ptr(n);
    for (int32_t t = 0; t < n; ++t) {
      TensorRef r = refs[t];
      r.S = T;
      r.tok = split_bounds(T, k);
      std::fill(mid[t]->ptr, mid[t]->ptr + r.head_elems(l) * elem, kPoison);
      std::fill(back[t].begin(), back[t].end(), kPoison);
      for (int64_t b = 0; b < b_loc; ++b)
        for (int64_t s = 0; s < r.tc(l); ++s)
          for (int64_t h = 0; h < r.H; ++h)
            for (int64_t d = 0; d < r.D; ++d)
              for (int64_t e = 0; e < elem; ++e)
                in[t][static_cast<size_t>(r.seq_index(l, b, s, h, d) * elem + e)] =
                    pattern_byte(cseed, t, first_seq + b, r.tok[l] + s, h, d, e);
      // A piece of no bytes goes as NULL (every other call), as the C ABI allows.
      const bool null_ok = c % 2 == 1;
      in_ptr[t] = r.seq_elems(l) == 0 && null_ok ? nullptr : in[t].data();
      mid_ptr[t] = r.head_elems(l) == 0 && null_ok ? nullptr : mid[t]->ptr;
      mid_cptr[t] = mid_ptr[t];
      back_ptr[t] = r.seq_elems(l) == 0 && null_ok ? nullptr : back[t].data();
      cr.push_back(r);
    }
    const int64_t tokens = thd ? T : -1;
    Tensors sx, gx;  // the scatter's and the gather's tensors
    for (int32_t t = 0; t < n; ++t) {
      sx.in.push_back(in_ptr[t]);
      sx.in_bytes.push_back(in[t].size());
      sx.out.push_back(mid_ptr[t]);
      sx.out_bytes.push_back(mid[t]->size);
      gx.in.push_back(mid_cptr[t]);
      gx.in_bytes.push_back(mid[t]->size);
      gx.out.push_back(back_ptr[t]);
      gx.out_bytes.push_back(back[t].size());
    }
    basp_status_t st = call(true, plan, tokens, sx);
    EXPECT(st == BASP_SUCCESS, "%s call %zu (T %lld): scatter: %s", label, c, static_cast<long long>(T),
           basp_last_error());
    int64_t wrong = 0;
    for (int32_t t = 0; t < n && st == BASP_SUCCESS; ++t) {
      const TensorRef& r = cr[t];
      for (int64_t b = 0; b < b_loc; ++b)
        for (int64_t s = 0; s < T; ++s)
          for (int64_t i = 0; i < r.hc(l); ++i)
            for (int64_t d = 0; d < r.D; ++d)
              for (int64_t e = 0; e < elem; ++e)
                wrong += mid[t]->ptr[r.head_index(l, b, s, i, d) * elem + e] !=
                         pattern_byte(cseed, t, first_seq + b, s, r.heads[l].begin + i, d, e);
    }
    EXPECT(wrong == 0, "%s call %zu (T %lld): scatter: %lld bytes wrong", label, c, static_cast<long long>(T),
           static_cast<long long>(wrong));
    if (k > 1 && T > 0) {  // with no token at all every path has nothing to move (the shared one stands in)
      basp_plan_query(plan, &info);
      const int32_t want = g_shared ? BASP_PATH_SHARED : g_forced_path;
      EXPECT(want < 0 || info.last_path == want, "%s: path %d, expected %d", label, info.last_path, want);
    }
    if (replicated && !summable(sh.dtype)) {
      st = call(false, plan, tokens, gx);
      EXPECT(st == BASP_ERROR_UNSUPPORTED, "%s: a summing gather of dtype %d: status %d", label, sh.dtype, st);
      EXPECT(std::strstr(basp_last_error(), "cannot be summed") != nullptr, "%s: message: %s", label,
             basp_last_error());
      continue;
    }
    if (replicated) {  // every holder's own contribution, then their sums
      for (int32_t t = 0; t < n; ++t) {
        const TensorRef& r = cr[t];
        for (int64_t b = 0; b < b_loc; ++b)
          for (int64_t s = 0; s < T; ++s)
            for (int64_t i = 0; i < r.hc(l); ++i)
              for (int64_t d = 0; d < r.D; ++d)
                basp::test::write_small_int(sh.dtype, mid[t]->ptr + r.head_index(l, b, s, i, d) * elem,
                                            contribution(cseed, l, first_seq + b, s, r.heads[l].begin + i, d));
      }
    }
    st = call(false, plan, tokens, gx);
    EXPECT(st == BASP_SUCCESS, "%s call %zu: gather: %s", label, c, basp_last_error());
    wrong = 0;
    for (int32_t t = 0; t < n && st == BASP_SUCCESS; ++t) {
      const TensorRef& r = cr[t];
      if (!replicated) {
        wrong += std::memcmp(back[t].data(), in[t].data(), static_cast<size_t>(r.seq_elems(l) * elem)) != 0;
        continue;
      }
      std::vector<uint8_t> want(static_cast<size_t>(elem));
      for (int64_t b = 0; b < b_loc; ++b)
        for (int64_t s = 0; s < r.tc(l); ++s)
          for (int64_t h = 0; h < r.H; ++h)
            for (int64_t d = 0; d < r.D; ++d) {
              int32_t sum = 0;
              for (int64_t m = 0; m < k; ++m) {
                if (r.heads[m].holds(h)) sum += contribution(cseed, m, first_seq + b, r.tok[l] + s, h, d);
              }
              basp::test::write_small_int(sh.dtype, want.data(), sum);
              wrong += std::memcmp(back[t].data() + r.seq_index(l, b, s, h, d) * elem, want.data(),
                                   static_cast<size_t>(elem)) != 0;
            }
    }
    EXPECT(wrong == 0, "%s call %zu (T %lld): gather: %lld elements wrong", label, c, static_cast<long long>(T),
           static_cast<long long>(wrong));
  }

  // A THD call whose token count differs on the last position of each group: MISMATCH on every rank of the
  // group, naming the counts, and the next call works.
  if (mismatch_probe && thd && k > 1) {
    const int64_t T = sh.seq_len - 1;
    const int64_t mine = l == k - 1 ? T + 1 : T;
    Tensors px;
    for (int32_t t = 0; t < n; ++t) {
      px.in.push_back(in[t].data());
      px.in_bytes.push_back(in[t].size());
      px.out.push_back(mid[t]->ptr);
      px.out_bytes.push_back(mid[t]->size);
    }
    const basp_status_t st = call(true, plan, mine, px);
    EXPECT(st == BASP_ERROR_MISMATCH, "%s: a mismatched T: status %d (%s)", label, st, basp_last_error());
    const std::string want = "of " + std::to_string(T + 1) + " tokens";
    EXPECT(std::strstr(basp_last_error(), want.c_str()) != nullptr, "%s: mismatch message: %s", label,
           basp_last_error());
    const basp_status_t again = call(true, plan, sh.seq_len, px);
    EXPECT(again == BASP_SUCCESS, "%s: the exchange after a mismatch: %s", label, basp_last_error());
    // The same T with other document boundaries on the last position: a mismatch naming them, then agreement.
    const int64_t cap = sh.seq_len;
    const int64_t mine_cu[3] = {0, l == k - 1 ? cap / 2 + 1 : cap / 2, cap};
    basp_plan_set_documents(plan, mine_cu, 2);
    const basp_status_t docs = call(true, plan, cap, px);
    EXPECT(docs == BASP_ERROR_MISMATCH, "%s: other document boundaries: status %d (%s)", label, docs,
           basp_last_error());
    EXPECT(std::strstr(basp_last_error(), "with document boundaries") != nullptr, "%s: message: %s", label,
           basp_last_error());
    const int64_t same_cu[3] = {0, cap / 2, cap};
    basp_plan_set_documents(plan, same_cu, 2);
    const basp_status_t agreed = call(true, plan, cap, px);
    EXPECT(agreed == BASP_SUCCESS, "%s: the same document boundaries: %s", label, basp_last_error());
    basp_plan_set_documents(plan, nullptr, 0);
  }
  mid.clear();
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
  return failures;
}

int32_t forced_path() {
  const char* env = std::getenv("BASP_MPI_TRANSPORT");
  if (env == nullptr) return -1;
  const std::string v = env;
  if (v == "p2p") return BASP_PATH_P2P;
  if (v == "cma" || v == "direct") return BASP_PATH_CMA;
  if (v == "staged") return BASP_PATH_STAGED;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int trials = argc > 1 ? std::atoi(argv[1]) : 20;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261202;
  g_shared = argc > 3 && std::string(argv[3]) == "shared";
  g_forced_path = forced_path();
#if BASP_TEST_DEVICE
  // Every rank needs a device (ranks share the GPUs in turn); THD calls agree on T before they move data.
  int devices = 0;
  const int have = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (all == 0) {
    if (g_rank == 0) std::printf("test_gpu_shapes: skipped: a rank has no CUDA device\n");
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(g_rank % devices);
  setenv("BASP_CHECK_EXCHANGES", "1", 1);
  g_shared = false;  // basp_mem_alloc memory is device memory there
  g_forced_path = BASP_PATH_NCCL;
#endif
  if (g_rank == 0) {
    const char* env = std::getenv("BASP_MPI_TRANSPORT");
    std::printf(
        "test_shapes: %d ranks, %d trials, seed %llu, path %s%s (usage: test_shapes [trials] [seed] "
        "[shared])\n",
        g_size, trials, static_cast<unsigned long long>(seed), env ? env : "auto",
        g_shared ? ", head-sharded tensors in basp_mem_alloc memory" : "");
  }
  std::mt19937_64 rng(seed);
  std::mt19937_64 dims_rng(seed + 1);  // per-tensor head sizes, drawn apart so that the shapes stay as they were
  // The models of the issue at K = N first (Ulysses over the world): Qwen2.5-7B's 28/4 heads (at K = 8 ranks 1, 3,
  // 5 hold two KV heads), Qwen2.5-3B's 16/2, MQA, Llama-3.2-3B's 24/8; then random shapes.
  std::vector<Shape> fixed;
  for (const auto& [hq, hkv, layout] : {std::tuple<int64_t, int64_t, int32_t>{28, 4, BASP_LAYOUT_BSHD},
                                        {16, 2, BASP_LAYOUT_SBHD},
                                        {8, 1, BASP_LAYOUT_THD},
                                        {24, 8, BASP_LAYOUT_BSHD}}) {
    Shape sh;
    sh.num_groups = 1;
    sh.micro_batch = 1;
    sh.layout = layout;
    sh.dtype = BASP_DTYPE_BF16;
    sh.seq_len = 3 * g_size + 1;
    sh.head_dim = 8;
    sh.heads = {hq, hkv, hkv};
    sh.split = {hq, hq, hq};
    if (layout == BASP_LAYOUT_THD) sh.calls = {sh.seq_len, 2 * g_size - 1};
    fixed.push_back(sh);
  }
  // Multi-head latent attention's shape in small: q and k of one head size, v of another, and the rotary part of the
  // key as one head of its own that follows the query split (replicated on every position, summed by the gather).
  for (const int32_t layout : {BASP_LAYOUT_SBHD, BASP_LAYOUT_THD}) {
    Shape sh;
    sh.layout = layout;
    sh.dtype = BASP_DTYPE_BF16;
    sh.seq_len = 2 * g_size + 3;
    sh.head_dim = 6;
    sh.heads = {2 * g_size, 2 * g_size, 2 * g_size, 1};
    sh.split = {2 * g_size, 2 * g_size, 2 * g_size, 2 * g_size};
    sh.dims = {0, 0, 5, 3};  // rows of 12, 10 and 6 bytes per head
    if (layout == BASP_LAYOUT_THD) sh.calls = {sh.seq_len, g_size + 1};
    fixed.push_back(sh);
  }
  int failed_trials = 0;
  bool probed = false;
  for (int trial = 0; trial < trials + static_cast<int>(fixed.size()); ++trial) {
    const bool is_fixed = trial < static_cast<int>(fixed.size());
    const Shape sh = is_fixed ? fixed[static_cast<size_t>(trial)] : with_dims(draw(rng), dims_rng);
    const bool probe = !probed && sh.layout == BASP_LAYOUT_THD && sh.seq_len >= 2 && g_size / sh.num_groups > 1;
    probed = probed || probe;
    int mine = run_trial(sh, rng(), probe);
    int any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (any > 0) {
      ++failed_trials;
      if (g_rank == 0) {
        char label[256];
        describe(sh, label, sizeof label);
        std::printf("trial %d FAILED: %s\n", trial, label);
      }
    }
  }
  if (g_rank == 0) {
    const int total = trials + static_cast<int>(fixed.size());
    std::printf("test_shapes: %d of %d trials failed\n", failed_trials, total);
#if BASP_TEST_DEVICE
    std::printf("test_gpu_shapes: %d checks, %d failed: %s\n", total, failed_trials,
                failed_trials ? "FAILED" : "PASSED");
#endif
  }
  MPI_Finalize();
  return failed_trials == 0 ? 0 : 1;
}
