// basp_batch_layer (docs/benchmarks.md section 12): one attention layer over a packed micro-batch with
// batch plans: scatter of Q, K, V, each rank's attention, gather of O; slowest rank, median over the runs. Compares
// the adaptive plan (basp_comm_partition_batch after basp_comm_calibrate, the attention coefficients set in the comm's
// cost model) with BASP's fixed group sizes K in {1, 2, 4, 8} (uniform groups of K placed as the planner places
// them, documents assigned by basp_comm_assign_documents: greedily, longest first, to the group with the fewest
// tokens, packed exactly when the greedy overflows K * capacity, as the planner packs its groups) and Ulysses (K = N).
//
// The attention is emulated: each rank sleeps (clock_nanosleep to an absolute deadline, so the cores stay free for
// the exchanges) for (c2 * sum L^2 + c1 * sum L) * its query heads, with c2, c1 per head (seconds; measured once
// with scripts/bench/batch_bench.py attn) times --scale. --no-wait skips the attention (exchange only).
//
// The predicted time of a fixed-K configuration is computed here from the exported model with the formula of
// src/plan/batch_planner.h (the unit of a rank is its node: no NVLink domain on the CPU); the same function applied
// to the planner's own answer is printed beside the planner's predicted_seconds as a check of this transcription.
//
// --equal-memory (section 12.7): every fixed K whose groups hold the longest document runs with the greedy assignment
// and no cap on a group's total; the fastest of them (measured) is the best fixed K, M_best the most sequence-side
// tokens one of its ranks holds, and the adaptive plan is then made with problem.capacity = M_best (the same memory).
// --calib-bytes B --calib-repeats R are passed to basp_comm_calibrate (0 0: its defaults, 4 MiB and 5).
// --estimate prints each configuration's emulated attention (slowest rank) and the run's total, and runs nothing.
// --import-model FILE takes the exchange terms of an exported cost model instead of calibrating (the attention terms
// still come from --c2, --c1 and --scale).
// --plan-only calibrates, plans and writes the configurations (their measured_s = predicted_s), and runs nothing:
// the input of scripts/bench/batch_bench.py real, which runs them with the attention computed.
//
// usage: mpirun -np 8 basp_batch_layer --c2 S --c1 S [--scale X] [--runs 10] [--seeds 0-9] [--no-uniform]
//                                      [--no-wait] [--capacity 4096] [--fill 1.0] [--model FILE] [--json FILE]
//                                      [--equal-memory] [--calib-bytes B] [--calib-repeats R] [--estimate]
//                                      [--plan-only] [--import-model FILE]
#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "study_mpi.h"

namespace {

using basp::bench::parse_double;
using basp::bench::parse_int;
using basp::bench::StudyOptions;

int g_rank = 0, g_size = 1;
constexpr int64_t kHq = 32, kHkv = 8, kD = 128, kElem = 2;

#define CHECK(call)                                                                                             \
  do {                                                                                                          \
    basp_status_t s_ = (call);                                                                                  \
    if (s_ != BASP_SUCCESS) {                                                                                   \
      std::fprintf(stderr, "rank %d: %s: %s (%s)\n", g_rank, #call, basp_status_string(s_), basp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                             \
    }                                                                                                           \
  } while (0)

struct Config {
  std::string name;                           // "adaptive", "K=2", ...
  std::vector<std::vector<int32_t>> members;  // per group, world ranks by position
  std::vector<std::vector<int32_t>> docs;     // per group, ascending
  double planner_predicted = -1;              // adaptive only
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most sequence-side tokens one rank of the configuration holds: ceil(T / K) over its groups.
int64_t max_rank_tokens(const Config& c, const std::vector<int64_t>& len) {
  int64_t most = 0;
  for (size_t g = 0; g < c.members.size(); ++g) {
    int64_t T = 0;
    for (int32_t d : c.docs[g]) T += len[d];
    most = std::max(most, ceil_div(T, static_cast<int64_t>(c.members[g].size())));
  }
  return most;
}

// The emulated attention of the slowest rank (seconds): per group (c2 * sum L^2 + c1 * sum L) * ceil(Hq / K).
double attention_seconds(const Config& c, const std::vector<int64_t>& len, double c2h, double c1h) {
  double worst = 0;
  for (size_t g = 0; g < c.members.size(); ++g) {
    double sq = 0, sum = 0;
    for (int32_t d : c.docs[g]) sq += double(len[d]) * double(len[d]), sum += double(len[d]);
    const double heads = double(ceil_div(kHq, static_cast<int64_t>(c.members[g].size())));
    worst = std::max(worst, (c2h * sq + c1h * sum) * heads);
  }
  return worst;
}

// The objective of src/plan/batch_planner.h, transcribed; unit = node.
double predict(const basp_cost_model_t& m, const std::vector<int>& node, const std::vector<int64_t>& len,
               const Config& c, bool with_attention, std::vector<double>* per_group = nullptr) {
  const size_t G = c.members.size();
  int num_nodes = 0;
  for (int n : node) num_nodes = std::max(num_nodes, n + 1);
  std::vector<double> pp_s(G), pp_g(G), sq(G), sum(G), share(G);
  std::vector<int64_t> K(G);
  for (size_t g = 0; g < G; ++g) {
    K[g] = static_cast<int64_t>(c.members[g].size());
    int64_t T = 0;
    for (int32_t d : c.docs[g]) T += len[d], sq[g] += double(len[d]) * double(len[d]), sum[g] += double(len[d]);
    const int64_t t = ceil_div(T, K[g]), hq = ceil_div(kHq, K[g]), hkv = std::max<int64_t>(1, ceil_div(kHkv, K[g]));
    pp_s[g] = double(t) * double(hq + 2 * hkv) * kD * kElem;
    pp_g[g] = double(t) * double(hq) * kD * kElem;
    share[g] = K[g] == 1 ? 1.0 : double(hq) / double(kHq);
  }
  // members of group g on node n
  std::vector<std::vector<int>> on(G, std::vector<int>(static_cast<size_t>(num_nodes), 0));
  for (size_t g = 0; g < G; ++g)
    for (int32_t r : c.members[g]) on[g][static_cast<size_t>(node[static_cast<size_t>(r)])]++;
  auto exchange = [&](const std::vector<double>& pp, std::vector<double>& out) {
    std::vector<double> link(static_cast<size_t>(num_nodes), 0.0);
    for (size_t g = 0; g < G; ++g)
      for (int n = 0; n < num_nodes; ++n)
        link[static_cast<size_t>(n)] +=
            pp[g] * on[g][static_cast<size_t>(n)] * double(K[g] - on[g][static_cast<size_t>(n)]);
    for (size_t g = 0; g < G; ++g) {
      if (K[g] <= 1) {
        out[g] = 0;
        continue;
      }
      int most = 0;
      double net = 0;
      for (int n = 0; n < num_nodes; ++n) {
        most = std::max(most, on[g][static_cast<size_t>(n)]);
        if (on[g][static_cast<size_t>(n)] > 0 && on[g][static_cast<size_t>(n)] < K[g])
          net = std::max(net, link[static_cast<size_t>(n)]);
      }
      out[g] = m.a0 + m.a1 * double(K[g] - 1) + m.beta_node * pp[g] * (most - 1) + m.beta_network * net;
    }
  };
  std::vector<double> xs(G), xg(G);
  exchange(pp_s, xs);
  exchange(pp_g, xg);
  double worst = 0;
  if (per_group) per_group->assign(G, 0.0);
  for (size_t g = 0; g < G; ++g) {
    const double a = with_attention ? (m.c2 * sq[g] + m.c1 * sum[g]) * share[g] : 0.0;
    const double t = xs[g] + a + xg[g];
    if (per_group) (*per_group)[g] = t;
    worst = std::max(worst, t);
  }
  return worst;
}

// Long-tail lengths: log-normal (median 1,024, sigma 1.2), clipped to [32, 16,384], until `total` (last cut).
std::vector<int64_t> long_tail(uint64_t seed, int64_t total) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(std::log(1024.0), 1.2);
  std::vector<int64_t> out;
  int64_t have = 0;
  while (have < total) {
    int64_t l = std::clamp<int64_t>(static_cast<int64_t>(std::llround(dist(rng))), 32, 16384);
    l = std::min(l, total - have);
    out.push_back(l);
    have += l;
  }
  return out;
}

double now() { return MPI_Wtime(); }

void sleep_until(const timespec& deadline) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) != 0) {
  }
}

struct Measured {
  double median = 0, min = 0, max = 0;
  int64_t max_rank_tokens = 0;
};

// Runs one configuration `runs` times (plus one warm-up): the slowest rank's layer time each run.
Measured run_config(basp_comm_t comm, const Config& c, const std::vector<int64_t>& len, const basp_cost_model_t& m,
                    double c2h, double c1h, bool wait, int runs) {
  // This rank's group and position.
  size_t g = 0, pos = 0;
  for (size_t i = 0; i < c.members.size(); ++i)
    for (size_t p = 0; p < c.members[i].size(); ++p)
      if (c.members[i][p] == g_rank) g = i, pos = p;
  (void)pos;
  std::vector<int32_t> sizes, ranks, group_docs, docs;
  std::vector<int64_t> lengths(len.begin(), len.end());
  for (size_t i = 0; i < c.members.size(); ++i) {
    sizes.push_back(static_cast<int32_t>(c.members[i].size()));
    ranks.insert(ranks.end(), c.members[i].begin(), c.members[i].end());
    group_docs.push_back(static_cast<int32_t>(c.docs[i].size()));
    docs.insert(docs.end(), c.docs[i].begin(), c.docs[i].end());
  }
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = static_cast<int32_t>(sizes.size());
  b.num_docs = static_cast<int32_t>(len.size());
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = group_docs.data();
  b.docs = docs.data();
  b.lengths = lengths.data();
  basp_plan_desc_t qkv = BASP_PLAN_DESC_INITIALIZER;
  qkv.layout = BASP_LAYOUT_THD;
  qkv.dtype = BASP_DTYPE_BF16;
  qkv.head_dim = kD;
  qkv.num_tensors = 3;
  qkv.num_heads[0] = kHq;
  qkv.num_heads[1] = kHkv;
  qkv.num_heads[2] = kHkv;
  qkv.query_heads[1] = kHq;
  qkv.query_heads[2] = kHq;
  basp_plan_desc_t out = qkv;
  out.num_tensors = 1;
  out.num_heads[1] = out.num_heads[2] = 0;
  out.query_heads[1] = out.query_heads[2] = 0;
  basp_plan_t pq = nullptr, po = nullptr;
  CHECK(basp_batch_plan_create(comm, &qkv, &b, &pq));
  CHECK(basp_batch_plan_create(comm, &out, &b, &po));
  basp_plan_info_t iq = BASP_PLAN_INFO_INITIALIZER, io = BASP_PLAN_INFO_INITIALIZER;
  CHECK(basp_plan_query(pq, &iq));
  CHECK(basp_plan_query(po, &io));
  std::vector<std::vector<uint16_t>> seq(3), head(3);
  for (int t = 0; t < 3; ++t) {
    seq[t].assign(static_cast<size_t>(std::max<int64_t>(1, iq.seq_sharded_elems[t])), 0x3f80);
    head[t].assign(static_cast<size_t>(std::max<int64_t>(1, iq.head_sharded_elems[t])), 0);
  }
  std::vector<uint16_t> o_head(static_cast<size_t>(std::max<int64_t>(1, io.head_sharded_elems[0])), 0x3f80);
  std::vector<uint16_t> o_seq(static_cast<size_t>(std::max<int64_t>(1, io.seq_sharded_elems[0])), 0);
  const void* in_q[3] = {seq[0].data(), seq[1].data(), seq[2].data()};
  void* out_q[3] = {head[0].data(), head[1].data(), head[2].data()};
  const void* in_o[1] = {o_head.data()};
  void* out_o[1] = {o_seq.data()};
  // This rank's attention: its query heads over its group's documents.
  double sq = 0, sum = 0;
  int64_t T = 0;
  for (int32_t d : c.docs[g]) sq += double(len[d]) * len[d], sum += double(len[d]), T += len[d];
  const double my_heads = double(iq.head_end[0] - iq.head_begin[0]);
  const double attention = wait ? (c2h * sq + c1h * sum) * my_heads : 0.0;
  (void)m;
  const int64_t my_tokens = iq.token_end - iq.token_begin;
  std::vector<double> times;
  for (int r = 0; r <= runs; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    CHECK(basp_scatter(pq, in_q, out_q, nullptr));
    if (attention > 0) {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const double end = double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9 + attention;
      ts.tv_sec = static_cast<time_t>(end);
      ts.tv_nsec = static_cast<long>((end - double(ts.tv_sec)) * 1e9);
      sleep_until(ts);
    }
    CHECK(basp_gather(po, in_o, out_o, nullptr));
    double dt = now() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r > 0) times.push_back(worst);
  }
  CHECK(basp_plan_destroy(pq));
  CHECK(basp_plan_destroy(po));
  std::sort(times.begin(), times.end());
  Measured res;
  res.median = basp::bench::median(times);
  res.min = times.front();
  res.max = times.back();
  int64_t mt = my_tokens;
  MPI_Allreduce(&mt, &res.max_rank_tokens, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return res;
}

// Uniform groups of K, placed as BASP places them (a BASP comm of B = N / K, its groups), documents assigned by
// the library's own rule (basp_comm_assign_documents: longest first to the group with the fewest tokens, packed
// exactly when that overflows), the same packing the adaptive planner gives its groups. `capped`: with a cap of
// K * capacity tokens per group; when no packing fits it, or when not capped, the uncapped greedy, and `within`
// says whether every rank then holds at most `capacity` tokens.
void fixed_k(basp_comm_t basp_comm_k, int32_t k, const std::vector<int64_t>& len, int64_t capacity, bool capped,
             Config& c, bool& within) {
  const int32_t G = g_size / k;
  const auto n = static_cast<int32_t>(len.size());
  c.members.assign(static_cast<size_t>(G), {});
  for (int32_t i = 0; i < G; ++i) {
    c.members[static_cast<size_t>(i)].resize(static_cast<size_t>(k));
    CHECK(basp_comm_group_ranks(basp_comm_k, i, c.members[static_cast<size_t>(i)].data(), k));
  }
  std::vector<int32_t> docs(len.size());
  auto assign = [&](int64_t group_cap) {
    c.docs.assign(static_cast<size_t>(G), {});
    for (int32_t i = 0; i < G; ++i) {
      basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
      if (basp_comm_assign_documents(basp_comm_k, len.data(), n, group_cap, c.members[static_cast<size_t>(i)][0], &a,
                                     docs.data(), nullptr, n) != BASP_SUCCESS)
        return false;
      if (a.group_index != i) {
        std::fprintf(stderr, "basp_batch_layer: rank %d is in group %d, not %d\n", c.members[size_t(i)][0],
                     a.group_index, i);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      c.docs[static_cast<size_t>(i)].assign(docs.begin(), docs.begin() + a.num_docs);
    }
    return true;
  };
  if (!(capped && assign(int64_t(k) * capacity)) && !assign(0)) {
    std::fprintf(stderr, "basp_batch_layer: K=%d: %s\n", k, basp_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  within = true;
  for (const auto& d : c.docs) {
    int64_t tokens = 0;
    for (int32_t i : d) tokens += len[static_cast<size_t>(i)];
    if (ceil_div(tokens, k) > capacity) within = false;
  }
  c.name = "K=" + std::to_string(k);
}

// [a, b, ...] and [[...], ...]: the JSON arrays of a run's batches and configurations (read back by
// scripts/bench/batch_bench.py real, which runs the same configurations with attention computed).
template <typename T>
std::string json_list(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string json_lists(const std::vector<std::vector<int32_t>>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_list(v[i]);
  return s + "]";
}

std::string describe(const Config& c, const std::vector<int64_t>& len) {
  std::string s;
  for (size_t g = 0; g < c.members.size(); ++g) {
    int64_t T = 0;
    for (int32_t d : c.docs[g]) T += len[d];
    s += (g ? " " : "") + std::to_string(c.members[g].size()) + "[";
    for (size_t p = 0; p < c.members[g].size(); ++p) s += (p ? "," : "") + std::to_string(c.members[g][p]);
    s += "]:" + std::to_string(c.docs[g].size()) + "d/" + std::to_string(T) + "t";
  }
  return s;
}

struct LayerOptions {
  double c2h = 0, c1h = 0;  // attention per head (--c2, --c1), seconds
  double scale = 1.0, fill = 1.0;
  int runs = 10, seed_lo = 0, seed_hi = 9;
  bool uniform = true, wait = true, longtail = true, equal_memory = false, estimate = false, plan_only = false;
  int64_t capacity = 4096, calib_bytes = 0;
  int calib_repeats = 0;
  std::string model_file, json_file, import_file;
};

constexpr const char* kUsage =
    "usage: mpirun -np 8 basp_batch_layer --c2 S --c1 S [options]\n"
    "  --c2 <s>, --c1 <s>     attention per head: seconds per token^2 and per token\n"
    "  --scale <x>            attention scale, default 1\n"
    "  --runs <n>             timed runs of each configuration, default 10\n"
    "  --seeds <lo[-hi]>      long-tail batches, default 0-9\n"
    "  --no-uniform           leave out the uniform case\n"
    "  --no-longtail          leave out the long-tail batches\n"
    "  --no-wait              no attention (exchange only)\n"
    "  --capacity <tokens>    per-rank capacity, default 4096\n"
    "  --fill <x>             long-tail tokens as a fraction of N * capacity, default 1.0\n"
    "  --model <file>         write the calibrated cost model\n"
    "  --json <file>          also write the results as JSON\n"
    "  --equal-memory         adaptive plan at the memory of the fastest fixed K\n"
    "  --calib-bytes <b>      basp_comm_calibrate's max_bytes (0: its default)\n"
    "  --calib-repeats <n>    basp_comm_calibrate's repeats (0: its default)\n"
    "  --estimate             print the emulated attention and predicted times, run nothing\n"
    "  --plan-only            calibrate, plan and write the configurations, run nothing\n"
    "  --import-model <file>  the exchange terms of an exported cost model instead of calibrating\n";

// The command line into `o`.
StudyOptions layer_options(LayerOptions& o) {
  StudyOptions options(kUsage);
  options.value("--c2", [&](const std::string& v) { o.c2h = parse_double(v, "--c2"); })
      .value("--c1", [&](const std::string& v) { o.c1h = parse_double(v, "--c1"); })
      .value("--scale", [&](const std::string& v) { o.scale = parse_double(v, "--scale"); })
      .value("--runs", [&](const std::string& v) { o.runs = static_cast<int>(parse_int(v, "--runs", 1, 1 << 20)); })
      .value("--seeds",
             [&](const std::string& v) {
               const auto dash = v.find('-');
               o.seed_lo = static_cast<int>(parse_int(v.substr(0, dash), "--seeds", 0, INT32_MAX));
               o.seed_hi = dash == std::string::npos
                               ? o.seed_lo
                               : static_cast<int>(parse_int(v.substr(dash + 1), "--seeds", o.seed_lo, INT32_MAX));
             })
      .flag("--no-uniform", [&] { o.uniform = false; })
      .flag("--no-longtail", [&] { o.longtail = false; })
      .flag("--no-wait", [&] { o.wait = false; })
      .value("--capacity", [&](const std::string& v) { o.capacity = parse_int(v, "--capacity", 1, int64_t{1} << 40); })
      .value("--fill", [&](const std::string& v) { o.fill = parse_double(v, "--fill"); })
      .value("--model", [&](const std::string& v) { o.model_file = v; })
      .value("--json", [&](const std::string& v) { o.json_file = v; })
      .flag("--equal-memory", [&] { o.equal_memory = true; })
      .flag("--estimate", [&] { o.estimate = true; })
      .value("--import-model", [&](const std::string& v) { o.import_file = v; })
      .flag("--plan-only", [&] { o.plan_only = o.estimate = true; })
      .value("--calib-bytes",
             [&](const std::string& v) { o.calib_bytes = parse_int(v, "--calib-bytes", 0, int64_t{1} << 40); })
      .value("--calib-repeats", [&](const std::string& v) {
        o.calib_repeats = static_cast<int>(parse_int(v, "--calib-repeats", 0, 1 << 20));
      });
  return options;
}

int run(const LayerOptions& o) {
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const double c2 = o.c2h * o.scale, c1 = o.c1h * o.scale;  // per head, as emulated
  // Node of every rank: its host name (sim-cluster gives each fake node its own).
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<size_t>(256 * g_size));
  MPI_Allgather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<int> node(static_cast<size_t>(g_size));
  std::map<std::string, int> ids;
  for (int r = 0; r < g_size; ++r) {
    std::string h(&hosts[static_cast<size_t>(256 * r)]);
    if (!ids.count(h)) ids[h] = static_cast<int>(ids.size());
    node[static_cast<size_t>(r)] = ids[h];
  }
  // The batch comm: its o.capacity leaves room for the fixed-K configurations that overflow 4,096 (reported).
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 0;
  cfg.batch_capacity = 4 * o.capacity;
  basp_comm_t comm = nullptr;
  CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm));
  // BASP comms of B = N / K: their groups are the fixed-K memberships.
  std::map<int32_t, basp_comm_t> fixed;
  for (int32_t k = 1; k <= g_size; k *= 2) {
    if (g_size % k) continue;
    basp_comm_config_t fc = BASP_COMM_CONFIG_INITIALIZER;
    fc.micro_batch = g_size / k;
    CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &fc, &fixed[k]));
  }
  const double tc0 = now();
  if (!o.import_file.empty()) {
    std::string text;
    if (FILE* f = std::fopen(o.import_file.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "basp_batch_layer: --import-model %s: cannot read it\n", o.import_file.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    CHECK(basp_comm_import_cost_model(comm, text.c_str()));
  } else if (!o.estimate || o.plan_only) {
    CHECK(basp_comm_calibrate(comm, o.calib_bytes, o.calib_repeats));
  }
  const double calib_s = now() - tc0;
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  CHECK(basp_comm_get_cost_model(comm, &m));
  m.c2 = c2 * kHq;  // all query heads on one rank
  m.c1 = c1 * kHq;
  CHECK(basp_comm_set_cost_model(comm, &m));
  CHECK(basp_comm_get_cost_model(comm, &m));
  size_t needed = 0;
  std::vector<char> text(8192);
  CHECK(basp_comm_export_cost_model(comm, text.data(), text.size(), &needed));
  FILE* js = nullptr;
  if (g_rank == 0) {
    std::printf("# basp_batch_layer: N %d, nodes %zu, Hq %lld Hkv %lld D %lld bf16, o.capacity %lld, o.runs %d, %s\n",
                g_size, ids.size(), (long long)kHq, (long long)kHkv, (long long)kD, (long long)o.capacity, o.runs,
                o.wait ? "attention emulated by sleeping" : "no attention (exchange only)");
    std::printf("# attention per head: c2 %.4g s/token^2, c1 %.4g s/token (measured) x o.scale %g\n", o.c2h, o.c1h,
                o.scale);
    std::printf("# calibration (max_bytes %lld, repeats %d) %.1f s; model:\n%s", (long long)o.calib_bytes,
                o.calib_repeats, calib_s, text.data());
    if (o.equal_memory)
      std::printf("# equal memory: fixed K uncapped; adaptive planned with o.capacity = M of the fastest fixed K\n");
    if (!o.model_file.empty()) {
      if (FILE* f = std::fopen(o.model_file.c_str(), "w")) std::fputs(text.data(), f), std::fclose(f);
    }
    if (!o.json_file.empty()) {
      js = std::fopen(o.json_file.c_str(), "w");
      std::fprintf(js,
                   "{\"model\": {\"a0\": %.6g, \"a1\": %.6g, \"beta_node\": %.6g, \"beta_network\": %.6g, "
                   "\"c2\": %.6g, \"c1\": %.6g}, \"scale\": %g, \"runs\": %d, \"wait\": %d, \"calibrate_s\": %.3f, "
                   "\"calib_bytes\": %lld, \"calib_repeats\": %d, \"equal_memory\": %d, \"plan_only\": %d, "
                   "\"c2_head\": %.6g, \"c1_head\": %.6g, \"capacity\": %lld, \"node_of\": %s, \"model_text\": \"",
                   m.a0, m.a1, m.beta_node, m.beta_network, m.c2, m.c1, o.scale, o.runs, o.wait ? 1 : 0, calib_s,
                   (long long)o.calib_bytes, o.calib_repeats, o.equal_memory ? 1 : 0, o.plan_only ? 1 : 0, o.c2h, o.c1h,
                   (long long)o.capacity, json_list(node).c_str());
      for (const char* t = text.data(); *t; ++t) std::fputs(*t == '\n' ? "\\n" : std::string(1, *t).c_str(), js);
      std::fprintf(js, "\", \"cases\": [\n");
    }
    std::printf("%-9s %-9s %8s %8s %7s %6s %7s %6s  %s\n", "batch", "config", "meas_ms", "pred_ms", "pred/m", "maxtok",
                "attn_ms", "range", "groups");
  }
  struct Case {
    std::string name;
    std::vector<int64_t> len;
  };
  std::vector<Case> cases;
  if (o.longtail) {
    for (int s = o.seed_lo; s <= o.seed_hi; ++s)
      cases.push_back(
          {"seed" + std::to_string(s),
           long_tail(static_cast<uint64_t>(s), static_cast<int64_t>(o.fill * double(g_size * o.capacity)))});
  }
  if (o.uniform) cases.push_back({"uniform", {16384, 16384}});
  bool first_case = true;
  double log_ratio_sum = 0, log_ratio_ulysses = 0, total_attention = 0, total_predicted = 0;
  int ratio_n = 0, uniform_pass = -1;
  for (const Case& cs : cases) {
    // The adaptive plan for a per-rank o.capacity.
    auto plan_adaptive = [&](int64_t cap) {
      basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
      p.num_docs = static_cast<int32_t>(cs.len.size());
      p.dtype = BASP_DTYPE_BF16;
      p.lengths = cs.len.data();
      p.query_heads = kHq;
      p.kv_heads = kHkv;
      p.head_dim = kD;
      p.capacity = cap;
      std::vector<int32_t> sizes(static_cast<size_t>(g_size)), ranks(static_cast<size_t>(g_size)),
          gdocs(static_cast<size_t>(g_size)), docs(cs.len.size());
      basp_batch_t b = BASP_BATCH_INITIALIZER;
      double predicted = 0;
      CHECK(basp_comm_partition_batch(comm, &p, sizes.data(), ranks.data(), gdocs.data(), docs.data(), &b, &predicted));
      Config c;
      c.name = "adaptive";
      c.planner_predicted = predicted;
      size_t at = 0, dat = 0;
      for (int32_t i = 0; i < b.num_groups; ++i) {
        c.members.emplace_back(ranks.begin() + static_cast<long>(at), ranks.begin() + static_cast<long>(at + sizes[i]));
        c.docs.emplace_back(docs.begin() + static_cast<long>(dat), docs.begin() + static_cast<long>(dat + gdocs[i]));
        at += static_cast<size_t>(sizes[i]);
        dat += static_cast<size_t>(gdocs[i]);
      }
      return c;
    };
    std::vector<Config> configs;
    std::vector<bool> within_cap;
    if (!o.equal_memory) configs.push_back(plan_adaptive(o.capacity)), within_cap.push_back(true);
    const int64_t longest = *std::max_element(cs.len.begin(), cs.len.end());
    for (auto& [k, fc] : fixed) {
      if (longest > int64_t(k) * o.capacity) continue;  // the longest document does not fit a group of K
      Config c;
      bool within = true;
      fixed_k(fc, k, cs.len, o.capacity, !o.equal_memory, c, within);
      if (k == g_size) c.name = "Ulysses";
      configs.push_back(c);
      within_cap.push_back(o.equal_memory || within);  // equal memory: no cap on a fixed K's groups
    }
    std::vector<Measured> meas;
    auto measure = [&](const Config& c) {
      if (o.estimate) {
        Measured e;
        e.median = e.min = e.max = predict(m, node, cs.len, c, o.wait);
        e.max_rank_tokens = max_rank_tokens(c, cs.len);
        return e;
      }
      return run_config(comm, c, cs.len, m, c2, c1, o.wait, o.runs);
    };
    for (const Config& c : configs) meas.push_back(measure(c));
    int64_t m_best = o.capacity;
    if (o.equal_memory) {
      // The fastest fixed K (measured; every rank has the same medians, reduced with MPI_MAX) and its memory.
      size_t bi = 0;
      for (size_t i = 1; i < meas.size(); ++i)
        if (meas[i].median < meas[bi].median) bi = i;
      m_best = max_rank_tokens(configs[bi], cs.len);
      configs.insert(configs.begin(), plan_adaptive(m_best));
      within_cap.insert(within_cap.begin(), true);
      meas.insert(meas.begin(), measure(configs[0]));
    }
    if (o.estimate && g_rank == 0) {
      for (const Config& c : configs) total_attention += (o.runs + 1) * attention_seconds(c, cs.len, c2, c1);
      total_predicted += (o.runs + 1) * std::accumulate(meas.begin(), meas.end(), 0.0,
                                                        [](double a, const Measured& x) { return a + x.median; });
    }
    if (g_rank == 0) {
      double best_fixed = 1e300, best_fixed_any = 1e300, ulysses = 0;
      std::string best_name = "-", best_any_name = "-";
      for (size_t i = 0; i < configs.size(); ++i) {
        const Config& c = configs[i];
        const double pred = predict(m, node, cs.len, c, o.wait);
        std::printf("%-9s %-9s %8.1f %8.1f %7.2f %6lld %7.0f %6s  %s", cs.name.c_str(), c.name.c_str(),
                    meas[i].median * 1e3, pred * 1e3, pred / meas[i].median, (long long)meas[i].max_rank_tokens,
                    attention_seconds(c, cs.len, c2, c1) * 1e3,
                    (std::to_string(int(meas[i].min * 1e3)) + "-" + std::to_string(int(meas[i].max * 1e3))).c_str(),
                    describe(c, cs.len).c_str());
        if (c.planner_predicted >= 0) std::printf("  (planner predicted %.1f ms)", c.planner_predicted * 1e3);
        if (i > 0 && !within_cap[i]) std::printf("  OVER CAPACITY");
        std::printf("\n");
        if (i > 0) {
          if (within_cap[i] && meas[i].median < best_fixed) best_fixed = meas[i].median, best_name = c.name;
          if (meas[i].median < best_fixed_any) best_fixed_any = meas[i].median, best_any_name = c.name;
          if (c.name == "Ulysses") ulysses = meas[i].median;
        }
      }
      const double ratio = best_fixed / meas[0].median;
      std::printf(
          "%-9s best fixed (within o.capacity) %s: %.2fx of adaptive; best fixed (any) %s: %.2fx; "
          "Ulysses %.2fx%s\n",
          cs.name.c_str(), best_name.c_str(), ratio, best_any_name.c_str(), best_fixed_any / meas[0].median,
          ulysses / meas[0].median,
          o.equal_memory ? (" (adaptive o.capacity M_best = " + std::to_string(m_best) + ")").c_str() : "");
      if (cs.name == "uniform") {
        // BASP's groups: those of the BASP comm of B = 2 (G = 2, K = 4), one sequence each.
        std::vector<std::vector<int32_t>> basp(2, std::vector<int32_t>(static_cast<size_t>(g_size / 2)));
        for (int32_t i = 0; i < 2; ++i) CHECK(basp_comm_group_ranks(fixed[g_size / 2], i, basp[i].data(), g_size / 2));
        bool pass = configs[0].members.size() == 2;
        for (size_t i = 0; pass && i < 2; ++i) {
          std::vector<int32_t> got = configs[0].members[i];
          std::sort(got.begin(), got.end());
          std::vector<int32_t> want = basp[i];
          std::sort(want.begin(), want.end());
          pass = got == want && configs[0].docs[i].size() == 1;
        }
        uniform_pass = pass ? 1 : 0;
        std::printf("uniform: adaptive plan chooses BASP's groups (G = 2, K = 4): %s\n", pass ? "PASS" : "FAIL");
      } else {
        log_ratio_sum += std::log(ratio);
        log_ratio_ulysses += std::log(ulysses / meas[0].median);
        ++ratio_n;
      }
      if (js) {
        std::fprintf(js,
                     "%s{\"batch\": \"%s\", \"num_docs\": %zu, \"longest\": %lld, \"adaptive_capacity\": %lld, "
                     "\"lengths\": %s, \"configs\": [",
                     first_case ? "" : ",\n", cs.name.c_str(), cs.len.size(), (long long)longest, (long long)m_best,
                     json_list(cs.len).c_str());
        for (size_t i = 0; i < configs.size(); ++i) {
          std::fprintf(js,
                       "%s{\"name\": \"%s\", \"measured_s\": %.6f, \"min_s\": %.6f, \"max_s\": %.6f, "
                       "\"predicted_s\": %.6f, \"planner_predicted_s\": %.6f, \"max_rank_tokens\": %lld, "
                       "\"within_capacity\": %d, \"attention_s\": %.6f, \"groups\": \"%s\", "
                       "\"members\": %s, \"docs\": %s}",
                       i ? ", " : "", configs[i].name.c_str(), meas[i].median, meas[i].min, meas[i].max,
                       predict(m, node, cs.len, configs[i], o.wait), configs[i].planner_predicted,
                       (long long)meas[i].max_rank_tokens, i == 0 || within_cap[i] ? 1 : 0,
                       attention_seconds(configs[i], cs.len, c2, c1), describe(configs[i], cs.len).c_str(),
                       json_lists(configs[i].members).c_str(), json_lists(configs[i].docs).c_str());
        }
        std::fprintf(js, "]}");
      }
      std::fflush(stdout);
    }
    first_case = false;
  }
  if (g_rank == 0) {
    if (o.estimate)
      std::printf(
          "estimate: emulated attention %.0f s, predicted layer time %.0f s over all o.runs (warm-ups included)\n",
          total_attention, total_predicted);
    if (ratio_n > 0)
      std::printf(
          "long-tail geometric mean over %d batches: best fixed K / adaptive %.2fx (goal >= 1.3x: %s), "
          "Ulysses / adaptive %.2fx\n",
          ratio_n, std::exp(log_ratio_sum / ratio_n), std::exp(log_ratio_sum / ratio_n) >= 1.3 ? "met" : "NOT met",
          std::exp(log_ratio_ulysses / ratio_n));
    if (js) std::fprintf(js, "\n], \"uniform_pass\": %d}\n", uniform_pass), std::fclose(js);
  }
  for (auto& [k, fc] : fixed) basp_comm_destroy(fc);
  basp_comm_destroy(comm);
  return uniform_pass == 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  LayerOptions o;
  StudyOptions options = layer_options(o);
  return basp::bench::mpi_study_main("basp_batch_layer", argc, argv, options, [&] { return run(o); });
}
