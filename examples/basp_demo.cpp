// The README's demo: DeepSpeed-Ulysses (one group of all N ranks) against BASP (G = gcd(N, B) groups) on a
// realistic attention shape, on the MPI backend. For each micro-batch size it prints the group shape, the
// bytes each rank sends, the median time of one scatter (Q, K, V) plus one gather (attention output), the
// resulting bandwidth, and whether a bit-exact check of both directions passed.
//
// usage: mpirun -np 8 basp_demo [--seq-len S] [--heads Hq] [--kv-heads Hkv] [--head-dim D] [--batches 2,4,8]
//                               [--iters N] [--layout bshd|sbhd]
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.hpp"

namespace {

struct Options {
  int64_t seq_len = 8192;
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  std::vector<int64_t> batches = {2, 4, 8};
  int iters = 5;
  basp_layout_t layout = BASP_LAYOUT_BSHD;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "basp_demo: %s\n", message.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

int64_t parse_positive(const char* name, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0)
    usage_error(std::string(name) + " (" + text + ") must be a positive integer");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seq-len")
      o.seq_len = parse_positive("--seq-len", value());
    else if (a == "--heads")
      o.heads = parse_positive("--heads", value());
    else if (a == "--kv-heads")
      o.kv_heads = parse_positive("--kv-heads", value());
    else if (a == "--head-dim")
      o.head_dim = parse_positive("--head-dim", value());
    else if (a == "--iters")
      o.iters = static_cast<int>(parse_positive("--iters", value()));
    else if (a == "--layout") {
      const std::string v = value();
      if (v == "bshd")
        o.layout = BASP_LAYOUT_BSHD;
      else if (v == "sbhd")
        o.layout = BASP_LAYOUT_SBHD;
      else
        usage_error("--layout (" + v + ") must be bshd or sbhd");
    } else if (a == "--batches") {
      o.batches.clear();
      std::string list = value();
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = list.find(',', pos);
        const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        o.batches.push_back(parse_positive("--batches", item.c_str()));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else {
      usage_error("unknown option " + a);
    }
  }
  return o;
}

// Element value as a function of global (tensor, sequence, token, head, dim): 16-bit, cheap, position-sensitive.
inline uint16_t value_at(int64_t t, int64_t b, int64_t s, int64_t h, int64_t d) {
  uint64_t x = static_cast<uint64_t>(((t * 131 + b) * 1000003 + s) * 8191 + h) * 257 + static_cast<uint64_t>(d);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint16_t>(x >> 48);
}

struct Result {
  int32_t groups = 0, group_size = 0;
  int64_t bytes_sent = 0, bytes_local = 0;
  double seconds = 0;
  bool verified = false;
};

Result run(const Options& o, int64_t batch, int32_t num_groups) {
  basp::CommConfig cfg;
  cfg.micro_batch = batch;
  cfg.num_groups = num_groups;
  basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
  const basp::RankInfo me = comm.query(o.seq_len);
  // qkv() sets query_heads[1] = query_heads[2] = Hq: K and V follow the split of the query heads they serve, so
  // each rank gets the KV heads its query heads read (also where K does not divide Hkv).
  basp::Plan qkv(comm, basp::PlanDesc::qkv(o.layout, BASP_DTYPE_BF16, o.seq_len, o.head_dim, o.heads, o.kv_heads));
  basp::Plan out(comm, basp::PlanDesc::make(o.layout, BASP_DTYPE_BF16, o.seq_len, o.head_dim, {o.heads}));
  const int64_t b_loc = me.num_sequences, s_loc = me.token_end - me.token_begin;
  const int32_t K = me.group_size;
  const int64_t D = o.head_dim;
  const int64_t heads[3] = {o.heads, o.kv_heads, o.kv_heads};
  // The heads this rank holds after the scatter: its share [a, b) of the query heads, and of K and V the KV heads
  // those read, [a / ratio, (b - 1) / ratio] with ratio = Hq / Hkv (none when a == b).
  const auto [qa, qb] = basp::split(o.heads, K, me.group_position);
  const int64_t ratio = o.heads / o.kv_heads;
  const int64_t kv_begin = qa == qb ? 0 : qa / ratio, kv_end = qa == qb ? 0 : (qb - 1) / ratio + 1;
  const int64_t head_begin[3] = {qa, kv_begin, kv_begin};
  const int64_t head_count[3] = {qb - qa, kv_end - kv_begin, kv_end - kv_begin};

  // Sequence-sharded Q, K, V filled from global coordinates; head-sharded buffers poisoned.
  std::vector<std::vector<uint16_t>> seq(3), head(3);
  for (int t = 0; t < 3; ++t) {
    const int64_t H = heads[t];
    seq[t].resize(static_cast<size_t>(b_loc * s_loc * H * D));
    head[t].assign(static_cast<size_t>(b_loc * o.seq_len * head_count[t] * D), 0xFFFF);
    for (int64_t b = 0; b < b_loc; ++b)
      for (int64_t s = 0; s < s_loc; ++s)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t row = o.layout == BASP_LAYOUT_BSHD ? (b * s_loc + s) : (s * b_loc + b);
          uint16_t* p = &seq[t][static_cast<size_t>((row * H + h) * D)];
          for (int64_t d = 0; d < D; ++d) p[d] = value_at(t, me.first_sequence + b, me.token_begin + s, h, d);
        }
  }
  std::vector<uint16_t> attn_back(seq[0].size(), 0xFFFF);
  const void* in[3] = {seq[0].data(), seq[1].data(), seq[2].data()};
  void* mid[3] = {head[0].data(), head[1].data(), head[2].data()};
  const void* attn[1] = {head[0].data()};  // stands in for the attention output: same shape as Q
  void* back[1] = {attn_back.data()};

  // Check one scatter + gather bit-exactly before timing.
  qkv.scatter(in, mid);
  out.gather(attn, back);
  bool ok = attn_back == seq[0];
  for (int t = 0; t < 3 && ok; ++t) {
    const int64_t hk = head_count[t];
    for (int64_t b = 0; b < b_loc && ok; ++b)
      for (int64_t s = 0; s < o.seq_len && ok; ++s)
        for (int64_t h = 0; h < hk && ok; ++h) {
          const int64_t row = o.layout == BASP_LAYOUT_BSHD ? (b * o.seq_len + s) : (s * b_loc + b);
          const uint16_t* p = &head[t][static_cast<size_t>((row * hk + h) * D)];
          for (int64_t d = 0; d < D; ++d)
            if (p[d] != value_at(t, me.first_sequence + b, s, head_begin[t] + h, d)) ok = false;
        }
  }
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  std::vector<double> times;
  for (int i = 0; i < o.iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    qkv.scatter(in, mid);
    out.gather(attn, back);
    double dt = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank sets the pace
    times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  Result r;
  r.groups = me.num_groups;
  r.group_size = me.group_size;
  r.bytes_sent = qkv.info().bytes_sent_per_exchange + out.info().bytes_sent_per_exchange;
  r.bytes_local = static_cast<int64_t>((seq[0].size() * 2 + seq[1].size() + seq[2].size()) * sizeof(uint16_t));
  r.seconds = times[times.size() / 2];
  r.verified = all_ok == 1;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(argc, argv);
  if (rank == 0) {
    std::printf("# libbasp %s demo: N=%d ranks, MPI backend, S=%lld Hq=%lld Hkv=%lld D=%lld bf16, %s\n",
                basp::version_string().c_str(), size, (long long)o.seq_len, (long long)o.heads, (long long)o.kv_heads,
                (long long)o.head_dim, o.layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD");
    std::printf("# one step = scatter(Q,K,V) + gather(O); time = median of %d steps (slowest rank)\n", o.iters);
    std::printf("# bandwidth = bytes this rank sends to other ranks per step / time\n");
    std::printf("%-8s %4s %4s %4s %6s %14s %14s %12s %10s %10s  %s\n", "mode", "B", "G", "K", "peers", "local MiB",
                "sent MiB/rank", "step ms", "GB/s", "speedup", "check");
  }
  int failures = 0;
  for (int64_t b : o.batches) {
    try {
      const Result u = run(o, b, 1);
      const Result p = run(o, b, -1);
      if (rank == 0) {
        for (const auto* r : {&u, &p}) {
          const bool is_u = r == &u;
          std::printf("%-8s %4lld %4d %4d %6d %14.1f %14.1f %12.2f %10.2f %9.2fx  %s\n", is_u ? "ulysses" : "basp",
                      (long long)b, r->groups, r->group_size, r->group_size - 1, r->bytes_local / 1048576.0,
                      r->bytes_sent / 1048576.0, r->seconds * 1e3,
                      r->seconds > 0 ? r->bytes_sent / r->seconds / 1e9 : 0.0, is_u ? 1.0 : u.seconds / p.seconds,
                      r->verified ? "verified" : "FAILED");
        }
      }
      failures += !u.verified + !p.verified;
    } catch (const basp::Error& e) {
      if (rank == 0) std::printf("%-8s %4lld  error: %s\n", "-", (long long)b, e.what());
      ++failures;
    }
  }
  if (rank == 0) std::printf("# %s\n", failures == 0 ? "all configurations verified" : "SOME CONFIGURATIONS FAILED");
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
