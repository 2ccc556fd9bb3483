// Randomised end-to-end check of scatter and gather under mpirun, through the public C++ wrapper.
// Every trial draws (B, layout, dtype, S, D, head counts, tensor count) from a seed that rank 0 prints; inputs
// are a function of global (tensor, sequence, token, head, dim, byte); outputs are poisoned; the scatter output
// must equal that function bit for bit, and the gather must restore the input exactly. Each trial runs the same
// global data through BASP (G = gcd(N, B)) and Ulysses (G = 1), so the two are checked to agree.
//
// With "shared", the head-sharded tensors live in basp_mem_alloc memory (the MPI backend's shared-memory path).
//
// usage: test_redistribution [trials] [seed] [shared]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "basp/basp.hpp"
#include "pattern.h"

using basp::test::kPoison;
using basp::test::pattern_byte;

namespace {

struct Trial {
  int64_t micro_batch;
  basp_layout_t layout;
  basp_dtype_t dtype;
  int64_t seq_len;
  int64_t head_dim;
  std::vector<int64_t> heads;
};

// Element offsets of the two tensor forms (plain formulas, independent of the library's index math).
int64_t seq_index(basp_layout_t layout, int64_t b_loc, int64_t s_loc, int64_t heads, int64_t D, int64_t b, int64_t s,
                  int64_t h, int64_t d) {
  if (layout == BASP_LAYOUT_BSHD) return ((b * s_loc + s) * heads + h) * D + d;
  return ((s * b_loc + b) * heads + h) * D + d;
}
int64_t head_index(basp_layout_t layout, int64_t b_loc, int64_t S, int64_t hk, int64_t D, int64_t b, int64_t s,
                   int64_t h, int64_t d) {
  if (layout == BASP_LAYOUT_BSHD) return ((b * S + s) * hk + h) * D + d;
  return ((s * b_loc + b) * hk + h) * D + d;
}

bool g_shared = false;
int32_t g_forced_path = -1;  // the path BASP_MPI_TRANSPORT forces (-1: auto, any path but shared)

// Head-sharded buffers: std::vector, or basp_mem_alloc memory released with the comm.
struct HeadBuffer {
  basp_comm_t comm = nullptr;
  uint8_t* ptr = nullptr;
  std::vector<uint8_t> own;
  HeadBuffer(basp_comm_t c, size_t bytes) {
    if (!g_shared) {
      own.assign(bytes, kPoison);
      ptr = own.data();
      return;
    }
    comm = c;
    void* p = nullptr;
    basp::check(basp_mem_alloc(c, bytes, &p));
    ptr = static_cast<uint8_t*>(p);
    std::memset(ptr, kPoison, bytes);
  }
  HeadBuffer(const HeadBuffer&) = delete;
  HeadBuffer& operator=(const HeadBuffer&) = delete;
  ~HeadBuffer() {
    if (comm) basp_mem_free(comm, ptr);
  }
};

int run_trial(const Trial& tr, int32_t num_groups, uint64_t seed, const char* label) {
  basp::CommConfig cfg;
  cfg.micro_batch = tr.micro_batch;
  cfg.num_groups = num_groups;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  const basp::RankInfo me = comm.query(tr.seq_len);
  basp::PlanDesc desc;
  desc.layout = tr.layout;
  desc.dtype = tr.dtype;
  desc.seq_len = tr.seq_len;
  desc.head_dim = tr.head_dim;
  desc.num_tensors = static_cast<int32_t>(tr.heads.size());
  for (size_t t = 0; t < tr.heads.size(); ++t) desc.num_heads[t] = tr.heads[t];
  basp::Plan plan(comm, desc);
  const basp::PlanInfo info = plan.info();

  const int64_t elem = static_cast<int64_t>(basp_dtype_size(tr.dtype));
  const int64_t K = me.group_size;
  const int64_t b_loc = me.num_sequences;
  const int64_t s_loc = tr.seq_len / K;
  const int64_t D = tr.head_dim;
  const size_t n = tr.heads.size();
  std::vector<std::vector<uint8_t>> in(n), back(n);
  std::vector<std::unique_ptr<HeadBuffer>> mid(n);
  std::vector<const void*> in_ptr(n), mid_cptr(n);
  std::vector<void*> mid_ptr(n), back_ptr(n);
  for (size_t t = 0; t < n; ++t) {
    const int64_t H = tr.heads[t];
    const int64_t bytes = b_loc * s_loc * H * D * elem;
    if (info.seq_sharded_elems[t] * elem != bytes) {
      std::fprintf(stderr, "plan info: seq_sharded_elems[%zu] = %lld, expected %lld\n", t,
                   static_cast<long long>(info.seq_sharded_elems[t]), static_cast<long long>(bytes / elem));
      return 1;
    }
    in[t].resize(bytes);
    mid[t] = std::make_unique<HeadBuffer>(comm.get(), static_cast<size_t>(bytes));
    back[t].assign(bytes, kPoison);
    for (int64_t b = 0; b < b_loc; ++b)
      for (int64_t s = 0; s < s_loc; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t e = 0; e < elem; ++e)
              in[t][seq_index(tr.layout, b_loc, s_loc, H, D, b, s, h, d) * elem + e] =
                  pattern_byte(seed, t, me.first_sequence + b, me.token_begin + s, h, d, e);
    in_ptr[t] = in[t].data();
    mid_ptr[t] = mid[t]->ptr;
    mid_cptr[t] = mid[t]->ptr;
    back_ptr[t] = back[t].data();
  }
  plan.scatter(in_ptr.data(), mid_ptr.data());
  int64_t wrong = 0;
  for (size_t t = 0; t < n; ++t) {
    const int64_t H = tr.heads[t];
    const int64_t hk = H / K;
    for (int64_t b = 0; b < b_loc; ++b)
      for (int64_t s = 0; s < tr.seq_len; ++s)
        for (int64_t h = 0; h < hk; ++h)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t e = 0; e < elem; ++e) {
              const uint8_t want = pattern_byte(seed, t, me.first_sequence + b, s, me.group_position * hk + h, d, e);
              if (mid[t]->ptr[head_index(tr.layout, b_loc, tr.seq_len, hk, D, b, s, h, d) * elem + e] != want) ++wrong;
            }
  }
  // The path the exchange took must be the one asked for: shared memory when the test put the head-sharded
  // tensors there (and the group has several ranks), else the one BASP_MPI_TRANSPORT forces, else any other.
  const int32_t path = plan.info().last_path;
  const int32_t want_path = K == 1 ? BASP_PATH_LOCAL : g_shared ? BASP_PATH_SHARED : g_forced_path;
  if ((want_path >= 0 && path != want_path) ||
      (want_path < 0 && (path == BASP_PATH_SHARED || path == BASP_PATH_NONE))) {
    std::fprintf(stderr, "rank %d %s: scatter took path %d, expected %d\n", me.rank, label, path, want_path);
    return 1;
  }
  plan.gather(mid_cptr.data(), back_ptr.data());
  if (plan.info().last_path != path) {
    std::fprintf(stderr, "rank %d %s: gather took path %d, scatter %d\n", me.rank, label, plan.info().last_path, path);
    return 1;
  }
  int64_t wrong_back = 0;
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < in[t].size(); ++i) wrong_back += in[t][i] != back[t][i];
  if (wrong || wrong_back) {
    std::fprintf(stderr,
                 "rank %d %s: %lld wrong bytes after scatter, %lld after gather (B=%lld G=%d K=%lld layout=%d "
                 "dtype=%d S=%lld D=%lld tensors=%zu)\n",
                 me.rank, label, static_cast<long long>(wrong), static_cast<long long>(wrong_back),
                 static_cast<long long>(tr.micro_batch), me.num_groups, static_cast<long long>(K), tr.layout, tr.dtype,
                 static_cast<long long>(tr.seq_len), static_cast<long long>(D), n);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int trials = argc > 1 ? std::atoi(argv[1]) : 24;
  uint64_t seed =
      argc > 2 && std::strcmp(argv[2], "random") != 0 ? std::strtoull(argv[2], nullptr, 0) : std::random_device{}();
  g_shared = argc > 3 && std::strcmp(argv[3], "shared") == 0;
  if (const char* forced = std::getenv("BASP_MPI_TRANSPORT")) {
    const std::string f = forced;
    g_forced_path = f == "p2p"      ? BASP_PATH_P2P
                    : f == "direct" ? BASP_PATH_DIRECT
                    : f == "staged" ? BASP_PATH_STAGED
                                    : -1;
  }
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("test_redistribution: N=%d trials=%d seed=%llu%s\n", size, trials, (unsigned long long)seed,
                g_shared ? " (head-sharded tensors in basp_mem_alloc memory)" : "");
  }
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  // Every real type (BASP_DTYPE_UNSET is not one; new types come after it).
  std::vector<basp_dtype_t> dtypes;
  for (int d = 0; d < BASP_DTYPE_COUNT; ++d) {
    if (basp_dtype_size(static_cast<basp_dtype_t>(d)) > 0) dtypes.push_back(static_cast<basp_dtype_t>(d));
  }
  int failures = 0;
  for (int i = 0; i < trials; ++i) {
    Trial tr;
    tr.micro_batch = pick(1, 2 * size + 2);
    tr.layout = static_cast<basp_layout_t>(pick(0, 1));
    tr.dtype = dtypes[static_cast<size_t>(pick(0, static_cast<int64_t>(dtypes.size()) - 1))];
    // S and the head counts must divide by K for both G = gcd(N, B) and G = 1: multiples of N do.
    tr.seq_len = size * pick(1, 4);
    tr.head_dim = pick(1, 3) == 1 ? pick(1, 5) : 8 * pick(1, 4);
    const int64_t tensors = pick(1, 3);
    for (int64_t t = 0; t < tensors; ++t) tr.heads.push_back(size * pick(1, 3));
    int local = 0;
    try {
      local |= run_trial(tr, -1, seed + i, "BASP");
      local |= run_trial(tr, 1, seed + i, "Ulysses");
    } catch (const basp::Error& e) {
      std::fprintf(stderr, "rank %d trial %d: %s\n", rank, i, e.what());
      local = 1;
    }
    int any = 0;
    MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    failures += any;
  }
  if (rank == 0) {
    std::printf("%d passed, %d failed\n", trials - failures, failures);
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
