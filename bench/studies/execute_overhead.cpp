// The per-call host overhead of an execute (docs/benchmarks.md): basp_scatter of a plan whose tensors are
// a few bytes, against a bare exchange of the same control messages (as many rounds of one message to and from
// every peer as the plan's path costs, read from the executor), in the same run, alternating blocks of calls.
// overhead = execute - bare: argument checks, handle lookup, health, pointer checks, the path's dispatch and its
// copies of a few bytes. Three variants of the pointers: the same buffers every call (what a training loop passes;
// the pointer-kind check runs once), two sets alternating (the check runs every call), and alternating with
// BASP_CHECK_POINTERS=0. Times are the slowest rank's, median over blocks.
//
// usage: mpirun -np N basp_execute_overhead [-B micro_batch] [-n calls per block] [-k blocks] [-J file.json]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "capi/handles.h"
#include "study_mpi.h"
#include "transport/mpi/control.h"

namespace {

using basp::bench::median;
using basp::bench::mpi_study_main;
using basp::bench::parse_int;
using basp::bench::path_name;
using basp::bench::slowest;
using basp::bench::StudyOptions;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t micro_batch = 1;
  int calls = 200;
  int blocks = 10;
  std::string json;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "basp_execute_overhead: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

void check(basp_status_t s, const char* what) {
  if (s != BASP_SUCCESS) die(std::string(what) + ": " + basp_last_error());
}

constexpr const char* kUsage =
    "usage: mpirun -np N basp_execute_overhead [options]\n"
    "  -B <n>      micro-batch of the comm, default 1\n"
    "  -n <calls>  calls per block, default 200\n"
    "  -k <n>      blocks, default 10\n"
    "  -J <file>   also write the results as JSON\n";

// The command line into `o`.
StudyOptions overhead_options(Options& o) {
  StudyOptions options(kUsage);
  options.value("-B", [&](const std::string& v) { o.micro_batch = parse_int(v, "-B", 1, 1 << 30); })
      .value("-n", [&](const std::string& v) { o.calls = static_cast<int>(parse_int(v, "-n", 1, 1 << 30)); })
      .value("-k", [&](const std::string& v) { o.blocks = static_cast<int>(parse_int(v, "-k", 1, 1 << 30)); })
      .value("-J", [&](const std::string& v) { o.json = v; });
  return options;
}

// `rounds` rounds of one control message to and from every peer of the group: what the plan's path sends.
class BareExchange {
 public:
  BareExchange(MPI_Comm group, int rounds) : comm_(group), rounds_(rounds) {
    MPI_Comm_size(comm_, &k_);
    MPI_Comm_rank(comm_, &me_);
    send_.assign(sizeof(basp::transport::mpi::ControlMessage), 1);
    recv_.assign(static_cast<size_t>(k_) * send_.size(), 0);
    requests_.assign(2 * static_cast<size_t>(k_), MPI_REQUEST_NULL);
  }
  void run() {
    const int bytes = static_cast<int>(send_.size());
    for (int r = 0; r < rounds_; ++r) {
      int n = 0;
      for (int i = 1; i < k_; ++i) {
        const int j = (me_ + k_ - i) % k_;
        MPI_Irecv(recv_.data() + static_cast<size_t>(j) * send_.size(), bytes, MPI_BYTE, j, r, comm_, &requests_[n++]);
      }
      for (int i = 1; i < k_; ++i) MPI_Isend(send_.data(), bytes, MPI_BYTE, (me_ + i) % k_, r, comm_, &requests_[n++]);
      MPI_Waitall(n, requests_.data(), MPI_STATUSES_IGNORE);
    }
  }

 private:
  MPI_Comm comm_;
  int rounds_;
  int k_ = 1;
  int me_ = 0;
  std::vector<unsigned char> send_, recv_;
  std::vector<MPI_Request> requests_;
};

struct Row {
  const char* pointers;
  double execute_us, bare_us, overhead_us;
};

int run(const Options& o) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = o.micro_batch;
  cfg.placement = BASP_PLACEMENT_CONTIGUOUS;
  basp_comm_t comm = nullptr;
  check(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm), "basp_comm_create_mpi");
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  check(basp_comm_query(comm, -1, 0, &me), "basp_comm_query");
  const int32_t k = me.group_size;

  // Q, K, V of K heads, D = 1, one token per rank, one byte per element: K bytes per tensor and rank.
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.dtype = BASP_DTYPE_BYTE;
  d.seq_len = k;
  d.head_dim = 1;
  d.num_tensors = 3;
  for (int t = 0; t < 3; ++t) d.num_heads[t] = k;
  basp_plan_t plans[2] = {nullptr, nullptr};
  check(basp_plan_create(comm, &d, &plans[0]), "basp_plan_create");
  setenv("BASP_CHECK_POINTERS", "0", 1);
  check(basp_plan_create(comm, &d, &plans[1]), "basp_plan_create (BASP_CHECK_POINTERS=0)");
  unsetenv("BASP_CHECK_POINTERS");

  const size_t bytes = static_cast<size_t>(k * me.num_sequences);
  std::vector<std::vector<unsigned char>> in(6, std::vector<unsigned char>(bytes, 3)),
      out(6, std::vector<unsigned char>(bytes, 0));
  const void* ins[2][3];
  void* outs[2][3];
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < 3; ++t) {
      ins[s][t] = in[static_cast<size_t>(3 * s + t)].data();
      outs[s][t] = out[static_cast<size_t>(3 * s + t)].data();
    }
  }
  check(basp_scatter(plans[0], ins[0], outs[0], nullptr), "basp_scatter");
  const auto& executor = basp::capi::plan_ref(plans[0], "plan")->executor();
  const int rounds = executor.last_control_rounds();
  const int32_t path = executor.last_path();

  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me.group_index, me.group_position, &group);
  BareExchange bare(group, rounds);

  struct Variant {
    const char* name;
    int plan;
    bool alternate;
  } variants[] = {{"same", 0, false}, {"alternating", 0, true}, {"alternating, checks off", 1, true}};
  std::vector<Row> rows;
  for (const Variant& v : variants) {
    std::vector<double> exec_us, bare_us, diff_us;
    for (int b = -1; b < o.blocks; ++b) {  // block -1: warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      for (int i = 0; i < o.calls; ++i) {
        const int set = v.alternate ? i % 2 : 0;
        check(basp_scatter(plans[v.plan], ins[set], outs[set], nullptr), "basp_scatter");
      }
      const double e =
          slowest(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.calls, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      for (int i = 0; i < o.calls; ++i) bare.run();
      const double x =
          slowest(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.calls, MPI_COMM_WORLD);
      if (b < 0) continue;
      exec_us.push_back(e);
      bare_us.push_back(x);
      diff_us.push_back(e - x);
    }
    rows.push_back({v.name, median(exec_us), median(bare_us), median(diff_us)});
  }
  for (int t = 0; t < 3; ++t) {
    if (out[static_cast<size_t>(t)] != in[static_cast<size_t>(t)]) die("the exchange did not deliver its bytes");
  }

  if (rank == 0) {
    std::printf(
        "# basp_execute_overhead: basp_scatter of Q, K, V of K bytes each per rank against a bare exchange of\n"
        "# the same control messages (%d round%s of %zu bytes to and from each peer), %d ranks, B %lld, K %d,\n"
        "# path %s, %d blocks of %d calls alternating execute and bare, slowest rank, median over blocks\n",
        rounds, rounds == 1 ? "" : "s", sizeof(basp::transport::mpi::ControlMessage), size,
        static_cast<long long>(o.micro_batch), k, path_name(path), o.blocks, o.calls);
    std::printf("#  K  path    rounds  pointers                  execute(us)  bare(us)  overhead(us)\n");
    for (const Row& r : rows) {
      std::printf("%4d  %-6s  %6d  %-24s  %11.2f  %8.2f  %12.2f\n", k, path_name(path), rounds, r.pointers,
                  r.execute_us, r.bare_us, r.overhead_us);
    }
    if (!o.json.empty()) {
      FILE* f = std::fopen(o.json.c_str(), "w");
      if (f == nullptr) die("cannot write " + o.json);
      std::fprintf(f,
                   "{\"ranks\": %d, \"micro_batch\": %lld, \"K\": %d, \"path\": \"%s\", \"rounds\": %d, "
                   "\"calls\": %d, \"blocks\": %d, \"results\": [",
                   size, static_cast<long long>(o.micro_batch), k, path_name(path), rounds, o.calls, o.blocks);
      for (size_t i = 0; i < rows.size(); ++i) {
        std::fprintf(f, "%s{\"pointers\": \"%s\", \"execute_us\": %.3f, \"bare_us\": %.3f, \"overhead_us\": %.3f}",
                     i ? ", " : "", rows[i].pointers, rows[i].execute_us, rows[i].bare_us, rows[i].overhead_us);
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  MPI_Comm_free(&group);
  basp_plan_destroy(plans[0]);
  basp_plan_destroy(plans[1]);
  basp_comm_destroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  StudyOptions options = overhead_options(o);
  return mpi_study_main("basp_execute_overhead", argc, argv, options, [&] { return run(o); });
}
