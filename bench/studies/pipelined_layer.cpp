// basp_pipelined_layer (docs/benchmarks.md, "Overlap: pipelined attention layer"): one attention layer whose
// exchanges are cut into C head chunks and started split-phase (basp_scatter_start, docs/overlap.md), so that the
// scatter of chunk c + 1 and the gather of chunk c - 1 move while attention works on chunk c:
//
//   forward   scatter Q, K, V (one plan, K and V with query_heads = Hq), attention A, gather O (a second plan)
//   backward  scatter dO (O's plan), attention backward 2 A, gather dQ, dK, dV (the QKV plan)
//
// Attention is emulated: each rank sleeps (clock_nanosleep to an absolute deadline, so the cores stay free for the
// exchanges) for its share of the chunk's query heads. E, the exchange of the layer, is the median of the C = 1 runs
// of scatter + gather without attention in this run (both passes with --backward); the attention is sized so that
// the layer's attention is ratio x E (the forward's A, the backward's 2 A). A
// layer's time is its slowest rank's, the median over --runs. For each ratio and C it prints T(C), T(1) / T(C) and
// the share of the exchange hidden, (T(1) - T(C)) / E; with --auto, also the C that basp_choose_head_chunks picks
// for the forward layer's attention seconds (run too, marked "auto"), checked against its own predictions (C = 1
// wherever the best predicts less than 5 % gain; the job aborts otherwise), and the predicted T(C) beside each.
// --calibrate fits the comm's cost model on this machine first (basp_comm_calibrate), so the predictions are in
// this machine's seconds.
//
// usage: mpirun -np 8 basp_pipelined_layer [--groups G] [--seq S] [--batch B] [--hq 32] [--hkv 8] [--dim 128]
//                                          [--ratios 0.25,0.5,1,2,4] [--chunks 1,2,4,8] [--runs 10] [--warmup 2]
//                                          [--backward] [--auto] [--calibrate] [--json FILE]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "study_mpi.h"

namespace {

using basp::bench::median;
using basp::bench::parse_double;
using basp::bench::parse_int;
using basp::bench::slowest;
using basp::bench::StudyOptions;

#define CHECK(call)                                                                            \
  do {                                                                                         \
    const basp_status_t s_ = (call);                                                           \
    if (s_ != BASP_SUCCESS) {                                                                  \
      std::fprintf(stderr, "basp_pipelined_layer: %s failed: %s\n", #call, basp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                            \
    }                                                                                          \
  } while (0)

struct Options {
  int32_t groups = -1;
  int64_t seq = 16384, batch = 2, hq = 32, hkv = 8, dim = 128;
  std::vector<double> ratios = {0.25, 0.5, 1, 2, 4};
  std::vector<int32_t> chunks = {1, 2, 4, 8};
  int runs = 10, warmup = 2;
  bool backward = false;
  bool automatic = false;  // --auto: also the C basp_choose_head_chunks picks
  bool calibrate = false;  // --calibrate: fit the comm's cost model first
  std::string json;
};

std::vector<double> parse_list(const std::string& text, const char* option) {
  std::vector<double> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(parse_double(text.substr(at, comma - at), option));
    at = comma + 1;
  }
  return out;
}

// One plan's tensors on this rank: sequence-sharded and head-sharded buffers (bf16 bytes, contents irrelevant).
struct Side {
  basp_plan_t plan = nullptr;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  std::vector<std::vector<char>> seq, head;
  std::vector<const void*> seq_in, head_in;
  std::vector<void*> seq_out, head_out;

  Side(basp_comm_t comm, const Options& o, bool qkv) {
    basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
    d.layout = BASP_LAYOUT_BSHD;
    d.dtype = BASP_DTYPE_BF16;
    d.seq_len = o.seq;
    d.head_dim = o.dim;
    d.num_tensors = qkv ? 3 : 1;
    d.num_heads[0] = o.hq;
    for (int t = 1; t < d.num_tensors; ++t) {
      d.num_heads[t] = o.hkv;
      d.query_heads[t] = o.hq;
    }
    CHECK(basp_plan_create(comm, &d, &plan));
    CHECK(basp_plan_query(plan, &info));
    for (int t = 0; t < d.num_tensors; ++t) {
      seq.emplace_back(static_cast<size_t>(info.seq_sharded_elems[t] * 2), 1);
      head.emplace_back(static_cast<size_t>(info.head_sharded_elems[t] * 2), 1);
      seq_in.push_back(seq.back().data());
      seq_out.push_back(seq.back().data());
      head_in.push_back(head.back().data());
      head_out.push_back(head.back().data());
    }
  }
  ~Side() { basp_plan_destroy(plan); }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
};

// This rank's share of its query heads in chunk c of C.
double share(const basp_plan_info_t& q, int32_t c, int32_t count) {
  const int64_t n = q.split_end[0] - q.split_begin[0];
  int64_t begin = 0, end = 0;
  CHECK(basp_split(n, count, c, &begin, &end));
  return n == 0 ? 0.0 : static_cast<double>(end - begin) / static_cast<double>(n);
}

// One layer pass: scatter on `in`, attention `attention` seconds (split by the chunks' heads), gather on `out`, in
// C chunks pipelined; returns this rank's seconds.
double pass(Side& in, Side& out, double attention, int32_t count) {
  const double t0 = MPI_Wtime();
  CHECK(basp_scatter_start(in.plan, 0, count, -1, in.seq_in.data(), in.head_out.data(), nullptr));
  for (int32_t c = 0; c < count; ++c) {
    CHECK(basp_scatter_wait(in.plan, c));
    if (c + 1 < count) {
      CHECK(basp_scatter_start(in.plan, c + 1, count, -1, in.seq_in.data(), in.head_out.data(), nullptr));
    }
    basp::bench::sleep_seconds(attention * share(in.info, c, count));
    CHECK(basp_gather_start(out.plan, c, count, -1, out.head_in.data(), out.seq_out.data(), nullptr));
    if (c > 0) CHECK(basp_gather_wait(out.plan, c - 1));
  }
  CHECK(basp_gather_wait(out.plan, count - 1));
  return MPI_Wtime() - t0;
}

// The layer's slowest-rank median over the runs: forward (qkv -> o), then backward (o -> qkv) when asked.
double layer(Side& qkv, Side& o, const Options& opt, double attention, int32_t count) {
  std::vector<double> times;
  for (int r = 0; r < opt.warmup + opt.runs; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = pass(qkv, o, attention, count);
    if (opt.backward) t += pass(o, qkv, 2 * attention, count);
    t = slowest(t, MPI_COMM_WORLD);
    if (r >= opt.warmup) times.push_back(t);
  }
  return median(times);
}

// basp_choose_head_chunks for the forward layer (collective: every rank gets the same C), checked against its own
// predictions: C = 1 exactly where no C predicts a gain of 5 % or more over T(1), else the least predicted T(C).
int32_t choose(Side& qkv, Side& o, double attention, std::vector<double>& predicted) {
  basp_head_chunk_choice_t choice = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  predicted.assign(static_cast<size_t>(qkv.info.max_head_chunks), 0.0);
  CHECK(basp_choose_head_chunks(qkv.plan, o.plan, -1, attention, 1, &choice, predicted.data(),
                                static_cast<int32_t>(predicted.size())));
  const auto best = std::min_element(predicted.begin(), predicted.end());
  const bool gain = *best < 0.95 * predicted[0];
  const int32_t expected = gain ? static_cast<int32_t>(best - predicted.begin()) + 1 : 1;
  if (choice.num_chunks != expected) {
    std::fprintf(stderr, "basp_pipelined_layer: auto chose C = %d, its predictions give C = %d\n", choice.num_chunks,
                 expected);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  return choice.num_chunks;
}

// --calibrate: the comm's cost model fitted on this machine (basp_comm_calibrate on a batch comm of the same world,
// which alone can calibrate), then set on the plain comm, identically on every rank.
void calibrate(basp_comm_t comm) {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 0;
  cfg.batch_capacity = 1 << 16;
  basp_comm_t batch = nullptr;
  CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &batch));
  CHECK(basp_comm_calibrate(batch, int64_t{32} << 20, 5));
  basp_cost_model_t model = BASP_COST_MODEL_INITIALIZER;
  CHECK(basp_comm_get_cost_model(batch, &model));
  CHECK(basp_comm_set_cost_model(comm, &model));
  CHECK(basp_comm_destroy(batch));
}

int run(const Options& opt) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = opt.batch;
  cfg.num_groups = opt.groups;
  basp_comm_t comm = nullptr;
  CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm));
  if (opt.calibrate) calibrate(comm);
  Side qkv(comm, opt, true), o(comm, opt, false);
  const int32_t most = qkv.info.max_head_chunks;
  const double exchange = layer(qkv, o, opt, 0.0, 1);
  if (rank == 0) {
    std::printf(
        "# basp_pipelined_layer: %d ranks, K = %d, S = %lld, B = %lld, Hq %lld, Hkv %lld, D %lld, bf16, %s, "
        "path %s, max chunks %d, E = %.3f ms\n",
        size, qkv.info.group_size, static_cast<long long>(opt.seq), static_cast<long long>(opt.batch),
        static_cast<long long>(opt.hq), static_cast<long long>(opt.hkv), static_cast<long long>(opt.dim),
        opt.backward ? "forward + backward" : "forward", basp::bench::path_name(qkv.info.plan_path), most,
        exchange * 1e3);
  }
  basp_cost_model_t model = BASP_COST_MODEL_INITIALIZER;
  CHECK(basp_comm_get_cost_model(comm, &model));
  if (rank == 0) {
    std::printf("# model: a0 %.3g s, a1 %.3g s, beta_node %.3g s/B, beta_network %.3g s/B, per_piece %.3g s\n",
                model.a0, model.a1, model.beta_node, model.beta_network, model.per_piece);
    std::printf("%8s %6s %12s %10s %8s %12s\n", "ratio", "C", "T_ms", "T1/TC", "hidden", "predicted_ms");
  }
  std::FILE* json = rank == 0 && !opt.json.empty() ? std::fopen(opt.json.c_str(), "w") : nullptr;
  if (json) {
    std::fprintf(json,
                 "{\"exchange_s\": %.9g, \"group_size\": %d, \"model\": {\"a0\": %.9g, \"a1\": %.9g, "
                 "\"beta_node\": %.9g, \"beta_network\": %.9g, \"per_piece\": %.9g}, \"rows\": [",
                 exchange, qkv.info.group_size, model.a0, model.a1, model.beta_node, model.beta_network,
                 model.per_piece);
  }
  bool first = true;
  for (const double ratio : opt.ratios) {
    // The layer's attention / exchange is `ratio`: forward A, backward 2 A.
    const double attention = ratio * exchange / (opt.backward ? 3.0 : 1.0);
    std::vector<double> predicted;
    const int32_t chosen = opt.automatic ? choose(qkv, o, attention, predicted) : 0;
    std::vector<int32_t> counts;
    for (const int32_t count : opt.chunks) {
      if (count <= most) counts.push_back(count);
    }
    if (chosen > 0 && std::find(counts.begin(), counts.end(), chosen) == counts.end()) counts.push_back(chosen);
    double t1 = 0;
    for (const int32_t count : counts) {
      const double t = layer(qkv, o, opt, attention, count);
      if (count == 1) t1 = t;
      if (rank != 0) continue;
      const double hidden = t1 > 0 ? (t1 - t) / exchange : 0.0;
      const double model = predicted.empty() ? 0.0 : predicted[static_cast<size_t>(count - 1)];
      std::printf("%8.2f %6d %12.3f %10.3f %8.3f %12.3f%s\n", ratio, count, t * 1e3, t1 > 0 ? t1 / t : 0.0, hidden,
                  model * 1e3, count == chosen ? "  auto" : "");
      if (json) {
        std::fprintf(json,
                     "%s\n  {\"ratio\": %g, \"chunks\": %d, \"seconds\": %.9g, \"hidden\": %.6g, "
                     "\"predicted_s\": %.9g, \"auto\": %s}",
                     first ? "" : ",", ratio, count, t, hidden, model, count == chosen ? "true" : "false");
      }
      first = false;
    }
  }
  if (json) {
    std::fprintf(json, "\n]}\n");
    std::fclose(json);
  }
  basp_comm_destroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  StudyOptions options(
      "usage: basp_pipelined_layer [--groups G] [--seq S] [--batch B] [--hq H] [--hkv H] [--dim D] [--ratios LIST]\n"
      "                            [--chunks LIST] [--runs N] [--warmup N] [--backward] [--auto] [--calibrate]\n"
      "                            [--json FILE]\n");
  options
      .value("--groups",
             [&](const std::string& v) { opt.groups = static_cast<int32_t>(parse_int(v, "--groups", -1, 1 << 20)); })
      .value("--seq", [&](const std::string& v) { opt.seq = parse_int(v, "--seq", 1, INT64_C(1) << 40); })
      .value("--batch", [&](const std::string& v) { opt.batch = parse_int(v, "--batch", 1, INT64_C(1) << 40); })
      .value("--hq", [&](const std::string& v) { opt.hq = parse_int(v, "--hq", 1, INT64_C(1) << 40); })
      .value("--hkv", [&](const std::string& v) { opt.hkv = parse_int(v, "--hkv", 1, INT64_C(1) << 40); })
      .value("--dim", [&](const std::string& v) { opt.dim = parse_int(v, "--dim", 1, INT64_C(1) << 40); })
      .value("--ratios", [&](const std::string& v) { opt.ratios = parse_list(v, "--ratios"); })
      .value("--chunks",
             [&](const std::string& v) {
               opt.chunks.clear();
               for (const double c : parse_list(v, "--chunks")) opt.chunks.push_back(static_cast<int32_t>(c));
             })
      .value("--runs",
             [&](const std::string& v) { opt.runs = static_cast<int>(parse_int(v, "--runs", 1, INT64_C(1) << 40)); })
      .value(
          "--warmup",
          [&](const std::string& v) { opt.warmup = static_cast<int>(parse_int(v, "--warmup", 0, INT64_C(1) << 40)); })
      .flag("--backward", [&] { opt.backward = true; })
      .flag("--auto", [&] { opt.automatic = true; })
      .flag("--calibrate", [&] { opt.calibrate = true; })
      .value("--json", [&](const std::string& v) { opt.json = v; });
  return basp::bench::mpi_study_main(
      "basp_pipelined_layer", argc, argv, options, [&] { return run(opt); }, MPI_THREAD_MULTIPLE);
}
