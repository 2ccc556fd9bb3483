// basp_progress_probe (docs/benchmarks.md, "Overlap: progress without library calls"): how much of one all-to-all
// hides behind compute that makes no MPI call, for three ways of starting it early:
//
//   basp split-phase  basp_scatter_start (C = 1) of a one-tensor plan, the comm's progress thread moving it
//   MPI_Ialltoall     the nonblocking collective of the same bytes per peer
//   MPIX persistent   MPIX_Alltoallv_init (Open MPI's pcollreq extension) of the same bytes, MPI_Start per run
//
// Each variant is timed blocking (E: basp_scatter, MPI_Alltoall, the persistent request started and waited at once),
// then started, followed by a sleep of ratio x E (the compute, no MPI call), then waited for: T. The share hidden is
// (E + ratio x E - T) / E: 1 when the exchange ran entirely during the sleep, 0 when it ran only inside the wait.
// Times are the slowest rank's, medians over --runs. Ulysses-shaped (one group of every rank): every rank sends
// 1/N of its sequence-sharded bytes to every peer, as the plan does.
//
// usage: mpirun -np N basp_progress_probe [--seq S] [--batch B] [--hq 32] [--dim 128] [--ratio 1] [--runs 10]
//                                         [--warmup 2] [--json FILE]
#include <mpi.h>

// After mpi.h, which defines what the extensions' declarations use.
#include <mpi-ext.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "study_mpi.h"

namespace {

using basp::bench::median;
using basp::bench::parse_double;
using basp::bench::parse_int;
using basp::bench::sleep_seconds;
using basp::bench::slowest;
using basp::bench::StudyOptions;

struct Options {
  int64_t seq = 16384, batch = 2, hq = 32, dim = 128;
  double ratio = 1.0;
  int runs = 10, warmup = 2;
  std::string json;
};

void must(basp_status_t status, const char* what) {
  if (status == BASP_SUCCESS) return;
  std::fprintf(stderr, "basp_progress_probe: %s failed: %s\n", what, basp_last_error());
  MPI_Abort(MPI_COMM_WORLD, 3);
}

// One way of running the exchange: start it, finish it (blocking = start then finish at once).
struct Variant {
  const char* name;
  std::function<void()> start, finish;
};

// The slowest rank's median seconds of start, sleep(compute), finish.
double timed(const Variant& v, const Options& o, double compute) {
  std::vector<double> times;
  for (int r = 0; r < o.warmup + o.runs; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    v.start();
    sleep_seconds(compute);
    v.finish();
    const double t = slowest(MPI_Wtime() - t0, MPI_COMM_WORLD);
    if (r >= o.warmup) times.push_back(t);
  }
  return median(times);
}

int run(const Options& o) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = o.batch;
  cfg.num_groups = 1;
  basp_comm_t comm = nullptr;
  must(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm), "basp_comm_create_mpi");
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = o.seq;
  d.head_dim = o.dim;
  d.num_tensors = 1;
  d.num_heads[0] = o.hq;
  basp_plan_t plan = nullptr;
  must(basp_plan_create(comm, &d, &plan), "basp_plan_create");
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  must(basp_plan_query(plan, &info), "basp_plan_query");
  const int64_t bytes = info.seq_sharded_elems[0] * 2;
  std::vector<char> seq(static_cast<size_t>(bytes), 1), head(static_cast<size_t>(info.head_sharded_elems[0] * 2), 1);
  const void* in[1] = {seq.data()};
  void* out[1] = {head.data()};
  // The raw MPI variants move the same bytes: 1/N of the sequence-sharded tensor to every peer.
  const int per_peer = static_cast<int>(bytes / size);
  std::vector<char> send(static_cast<size_t>(per_peer) * size, 1), recv(send.size(), 0);
  std::vector<int> counts(static_cast<size_t>(size), per_peer), displs(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) displs[static_cast<size_t>(i)] = i * per_peer;
  MPI_Request request = MPI_REQUEST_NULL, persistent = MPI_REQUEST_NULL;
  MPIX_Alltoallv_init(send.data(), counts.data(), displs.data(), MPI_BYTE, recv.data(), counts.data(), displs.data(),
                      MPI_BYTE, MPI_COMM_WORLD, MPI_INFO_NULL, &persistent);
  const std::vector<std::pair<Variant, Variant>> variants = {
      {{"basp split-phase", [&] { must(basp_scatter_start(plan, 0, 1, -1, in, out, nullptr), "start"); },
        [&] { must(basp_scatter_wait(plan, 0), "basp_scatter_wait"); }},
       {"basp_scatter", [&] { must(basp_scatter(plan, in, out, nullptr), "basp_scatter"); }, [] {}}},
      {{"MPI_Ialltoall",
        [&] {
          MPI_Ialltoall(send.data(), per_peer, MPI_BYTE, recv.data(), per_peer, MPI_BYTE, MPI_COMM_WORLD, &request);
        },
        [&] { MPI_Wait(&request, MPI_STATUS_IGNORE); }},
       {"MPI_Alltoall",
        [&] { MPI_Alltoall(send.data(), per_peer, MPI_BYTE, recv.data(), per_peer, MPI_BYTE, MPI_COMM_WORLD); },
        [] {}}},
      {{"MPIX persistent", [&] { MPI_Start(&persistent); }, [&] { MPI_Wait(&persistent, MPI_STATUS_IGNORE); }},
       {"MPIX persistent", [&] { MPI_Start(&persistent); }, [&] { MPI_Wait(&persistent, MPI_STATUS_IGNORE); }}},
  };
  if (rank == 0) {
    std::printf("# basp_progress_probe: %d ranks, %lld bytes per rank (%d per peer), path %s, ratio %g\n", size,
                static_cast<long long>(bytes), per_peer, basp::bench::path_name(info.plan_path), o.ratio);
    std::printf("%-18s %10s %10s %10s %8s\n", "variant", "E_ms", "W_ms", "T_ms", "hidden");
  }
  std::FILE* json = rank == 0 && !o.json.empty() ? std::fopen(o.json.c_str(), "w") : nullptr;
  if (json) {
    std::fprintf(json, "{\"ranks\": %d, \"bytes_per_rank\": %lld, \"path\": \"%s\", \"ratio\": %g, \"rows\": [", size,
                 static_cast<long long>(bytes), basp::bench::path_name(info.plan_path), o.ratio);
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    const double e = timed(variants[i].second, o, 0.0);
    const double w = o.ratio * e;
    const double t = timed(variants[i].first, o, w);
    const double hidden = (e + w - t) / e;
    if (rank != 0) continue;
    std::printf("%-18s %10.3f %10.3f %10.3f %8.3f\n", variants[i].first.name, e * 1e3, w * 1e3, t * 1e3, hidden);
    if (json) {
      std::fprintf(json,
                   "%s\n  {\"variant\": \"%s\", \"exchange_s\": %.9g, \"compute_s\": %.9g, \"seconds\": %.9g, "
                   "\"hidden\": %.6g}",
                   i ? "," : "", variants[i].first.name, e, w, t, hidden);
    }
  }
  if (json) {
    std::fprintf(json, "\n]}\n");
    std::fclose(json);
  }
  MPI_Request_free(&persistent);
  must(basp_plan_destroy(plan), "basp_plan_destroy");
  must(basp_comm_destroy(comm), "basp_comm_destroy");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  StudyOptions options(
      "usage: basp_progress_probe [--seq S] [--batch B] [--hq H] [--dim D] [--ratio R] [--runs N] [--warmup N]\n"
      "                           [--json FILE]\n");
  options.value("--seq", [&](const std::string& v) { opt.seq = parse_int(v, "--seq", 1, INT64_C(1) << 40); })
      .value("--batch", [&](const std::string& v) { opt.batch = parse_int(v, "--batch", 1, INT64_C(1) << 40); })
      .value("--hq", [&](const std::string& v) { opt.hq = parse_int(v, "--hq", 1, INT64_C(1) << 40); })
      .value("--dim", [&](const std::string& v) { opt.dim = parse_int(v, "--dim", 1, INT64_C(1) << 40); })
      .value("--ratio",
             [&](const std::string& v) {
               opt.ratio = parse_double(v, "--ratio");
               if (opt.ratio < 0) throw basp::bench::ArgError("--ratio (" + v + ") must be >= 0");
             })
      .value("--runs",
             [&](const std::string& v) { opt.runs = static_cast<int>(parse_int(v, "--runs", 1, INT64_C(1) << 30)); })
      .value(
          "--warmup",
          [&](const std::string& v) { opt.warmup = static_cast<int>(parse_int(v, "--warmup", 0, INT64_C(1) << 30)); })
      .value("--json", [&](const std::string& v) { opt.json = v; });
  return basp::bench::mpi_study_main(
      "basp_progress_probe", argc, argv, options, [&] { return run(opt); }, MPI_THREAD_MULTIPLE);
}
