// basp_layout_cost: the price of the layout. For each micro-batch B and each mode (Ulysses: one group of N;
// BASP: G = gcd(N, B) groups of K), times basp_scatter, basp_gather and a bare MPI_Alltoall of the same bytes
// per rank over the same K ranks. Every run times every (B, mode) and all three operations, in an order that
// rotates from run to run, so the comparisons are made under the same machine load; it reports medians over the
// runs and the ratios scatter/alltoall and gather/alltoall. One run's time is the slowest rank's. Before timing,
// one scatter and one gather of each configuration are checked bit-exactly. Uniform shapes only (S a multiple of
// N, K dividing the heads), since MPI_Alltoall moves equal blocks; basp_shape_cost measures the uneven ones.
//
// usage: mpirun -np 8 basp_layout_cost [-b 64M] [-n 10] [-w 2] [-B 1,2,4,8] [--heads 32] [--head-dim 128]
//                                      [-d bf16] [--layout bshd] [-c 1] [-J results.json]
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "basp/basp.hpp"
#include "perf_args.h"
#include "perf_check.h"
#include "perf_json.h"
#include "perf_memory.h"
#include "perf_mpi.h"
#include "perf_shape.h"
#include "study_mpi.h"

namespace basp::bench {
namespace {

constexpr const char* kProgram = "basp_layout_cost";
constexpr uint64_t kSeed = 0x6c61796f7574ull;

struct CostOptions {
  int64_t bytes = 64 << 20;
  int32_t runs = 10;
  int32_t warmup = 2;
  std::vector<int64_t> micro_batches{1, 2, 4, 8};
  int64_t heads = 32;
  int64_t head_dim = 128;
  basp_dtype_t dtype = BASP_DTYPE_BF16;
  basp_layout_t layout = BASP_LAYOUT_BSHD;
  int32_t check = 1;
  std::string json_path;
  bool shared_memory = false;  // head-sharded tensors in basp_mem_alloc memory
};

constexpr const char* kUsage =
    "usage: mpirun -np 8 basp_layout_cost [options]\n"
    "  -b <size>         bytes per rank of the one tensor (K/M/G suffixes), default 64M\n"
    "  -n <runs>         timed runs of every configuration and operation, default 10\n"
    "  -w <n>            untimed rounds before timing, default 2\n"
    "  -B <list>         micro-batch sizes, default 1,2,4,8 (Ulysses and BASP for each)\n"
    "  --heads <n>       heads of the tensor, default 32\n"
    "  --head-dim <n>    head dimension, default 128\n"
    "  -d <type>         element type (as basp_alltoall_perf -d), default bf16\n"
    "  --layout <l>      bshd or sbhd, default bshd\n"
    "  -c <0|1>          check one scatter and gather of each configuration bit-exactly, default 1\n"
    "  -J <file>         also write the results as JSON\n"
    "  --mem <m>         host (default): the head-sharded tensor in ordinary memory; shared: in basp_mem_alloc\n"
    "                    memory, which the MPI backend moves with plain copies inside a node\n";

// The command line into `o`.
StudyOptions cost_options(CostOptions& o) {
  StudyOptions options(kUsage);
  options.value("-b", [&](const std::string& v) { o.bytes = parse_size(v, "-b"); })
      .value("-n", [&](const std::string& v) { o.runs = static_cast<int32_t>(parse_int(v, "-n", 1, 100000)); })
      .value("-w", [&](const std::string& v) { o.warmup = static_cast<int32_t>(parse_int(v, "-w", 0, 100000)); })
      .value("-B", [&](const std::string& v) { o.micro_batches = parse_int_list(v, "-B", 1, 1000000); })
      .value("--heads", [&](const std::string& v) { o.heads = parse_int(v, "--heads", 1, 1000000); })
      .value("--head-dim", [&](const std::string& v) { o.head_dim = parse_int(v, "--head-dim", 1, 1000000); })
      .value("--mem",
             [&](const std::string& v) {
               if (v != "host" && v != "shared") throw ArgError("--mem ('" + v + "'): must be host or shared");
               o.shared_memory = v == "shared";
             })
      .value("-d", [&](const std::string& v) { o.dtype = parse_dtype(v); })
      .value("--layout", [&](const std::string& v) { o.layout = parse_layout(v); })
      .value("-c", [&](const std::string& v) { o.check = static_cast<int32_t>(parse_int(v, "-c", 0, 1)); })
      .value("-J", [&](const std::string& v) { o.json_path = v; });
  return options;
}

struct Result {
  int64_t micro_batch = 0;
  std::string mode;
  int32_t groups = 0;
  int32_t k = 0;
  int64_t seq_len = 0;
  int64_t bytes = 0;
  double scatter_ms = 0;
  double gather_ms = 0;
  double alltoall_ms = 0;
  int64_t wrong = -1;
  int32_t path = BASP_PATH_NONE;  // basp_path_t the exchange took
};

class LayoutCost {
 public:
  LayoutCost(const CostOptions& o, MPI_Comm world) : o_(o), world_(world) {
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    elem_ = static_cast<int64_t>(basp_dtype_size(o_.dtype));
  }

  int run() {
    const std::vector<Exchange> one_tensor{{Direction::kScatter, {{"Q", o_.heads, 0}}}};
    const int64_t token_bytes = bytes_per_token(one_tensor, o_.head_dim, elem_);
    // A bare MPI_Alltoall moves equal blocks: S a multiple of N (so of every K), each rank B*S/N tokens.
    rows_ = shape_rows({o_.bytes}, o_.micro_batches, size_, token_bytes, elem_, Mode::kBoth);
    for (RowShape& r : rows_) {
      r.seq_len = std::max<int64_t>(size_, r.seq_len / size_ * size_);
      r.bytes = r.micro_batch * (r.seq_len / size_) * token_bytes;
      r.count = r.bytes / elem_;
    }
    int64_t max_bytes = 0;
    for (const RowShape& r : rows_) max_bytes = std::max(max_bytes, r.bytes);
    memory_ = make_host_memory();
    for (Buffer* b : {&seq_in_, &head_out_, &seq_back_, &a2a_send_, &a2a_recv_}) {
      *b = Buffer(*memory_, static_cast<size_t>(max_bytes));
    }
    print("# " + std::string(kProgram) +
          ": basp_scatter and basp_gather against a bare MPI_Alltoall of the same "
          "bytes over the same K ranks\n# nranks " +
          std::to_string(size_) + ", one tensor of heads " + std::to_string(o_.heads) + " head-dim " +
          std::to_string(o_.head_dim) + " " + dtype_name(o_.dtype) + " " + layout_name(o_.layout) + ", runs " +
          std::to_string(o_.runs) +
          " (median of the slowest rank's time), "
          "warmup " +
          std::to_string(o_.warmup) + ", BASP_MPI_TRANSPORT=" + transport_env() + ", memory " +
          (o_.shared_memory ? "shared (basp_mem_alloc)" : "host") + "\n# " + utc_date() +
          "\n# every run times every configuration and operation, in an order that rotates from run to run\n#\n");
    for (const RowShape& r : rows_) {
      for (int32_t groups : {1, -1}) {
        auto c = std::make_unique<Config>();
        if (!setup(r, groups, *c)) return 3;
        if (groups == -1 && c->res.groups == 1) continue;  // gcd(N, B) = 1: BASP is Ulysses
        configs_.push_back(std::move(c));
      }
    }
    const int64_t total_wrong = check_then_time(
        kProgram, rank_, world_, o_.check, configs_, [&](auto& c) { return check(c); }, [&] { time_all(); });
    print(
        "#    B     mode    G    K          S     size(B)  scatter(ms)  gather(ms)  alltoall(ms)  scatter/a2a  "
        "gather/a2a  #wrong  path\n");
    for (const auto& c : configs_) {
      const Result& res = c->res;
      char line[256];
      std::snprintf(line, sizeof line, "%6lld %8s %4d %4d %10lld %11lld %12.2f %11.2f %13.2f %12.2f %11.2f %7s  %s\n",
                    static_cast<long long>(res.micro_batch), res.mode.c_str(), res.groups, res.k,
                    static_cast<long long>(res.seq_len), static_cast<long long>(res.bytes), res.scatter_ms,
                    res.gather_ms, res.alltoall_ms, res.scatter_ms / res.alltoall_ms, res.gather_ms / res.alltoall_ms,
                    res.wrong < 0 ? "N/A" : std::to_string(res.wrong).c_str(), path_name(res.path));
      print(line);
    }
    print_comparison();
    print(o_.check ? "# Out of bounds values : " + std::to_string(total_wrong) + (total_wrong ? " FAILED\n" : " OK\n")
                   : std::string("# Out of bounds values : N/A (not checked: -c 0)\n"));
    write_json(total_wrong);
    return total_wrong ? 1 : 0;
  }

 private:
  struct GroupComm {
    MPI_Comm comm = MPI_COMM_NULL;
    ~GroupComm() {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  };

  // One (B, mode): its comm, plan, the bare all-to-all's communicator over the same ranks, and its times.
  struct Config {
    basp::Comm comm;
    basp::Plan plan;
    basp::RankInfo info;
    GroupComm group;
    void* shared_head = nullptr;  // --mem shared: the head-sharded tensor, from basp_mem_alloc on `comm`
    int per_peer = 0;
    Result res;
    std::vector<double> times[3];  // scatter, gather, alltoall: seconds per run
    Config() = default;
    Config(const Config&) = delete;
    Config& operator=(const Config&) = delete;
    ~Config() {
      if (shared_head) basp_mem_free(comm.get(), shared_head);  // collective: every rank frees in one order
    }
  };

  void* head_buffer(const Config& c) const { return c.shared_head ? c.shared_head : head_out_.get(); }

  void print(const std::string& s) const {
    if (rank_ == 0) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }
  }

  // Ulysses vs BASP for every B where they differ: scatter + gather of the same bytes.
  void print_comparison() const {
    print("#\n# BASP vs Ulysses (median scatter + gather)\n#    B  ulysses(ms)  basp(ms)  ulysses/basp\n");
    for (const auto& u : configs_) {
      if (u->res.mode != "ulysses") continue;
      for (const auto& b : configs_) {
        if (b->res.mode != "basp" || b->res.micro_batch != u->res.micro_batch) continue;
        char line[128];
        const double tu = u->res.scatter_ms + u->res.gather_ms;
        const double tb = b->res.scatter_ms + b->res.gather_ms;
        std::snprintf(line, sizeof line, "%6lld %12.2f %9.2f %13.2f\n", static_cast<long long>(u->res.micro_batch), tu,
                      tb, tu / tb);
        print(line);
      }
    }
  }

  bool setup(const RowShape& r, int32_t requested_groups, Config& c) {
    const bool ok = all_succeed(world_, kProgram, [&] {
      basp::CommConfig cfg;
      cfg.micro_batch = r.micro_batch;
      cfg.num_groups = requested_groups;
      c.comm = basp::Comm::from_mpi(MPI_Comm_c2f(world_), cfg);
      c.info = c.comm.query(r.seq_len);
      if (requested_groups == -1 && c.info.num_groups == 1) return;
      c.plan = basp::Plan(c.comm, basp::PlanDesc::make(o_.layout, o_.dtype, r.seq_len, o_.head_dim, {o_.heads}));
      if (o_.shared_memory) basp::check(basp_mem_alloc(c.comm.get(), static_cast<size_t>(r.bytes), &c.shared_head));
    });
    if (!ok) return false;
    c.res.micro_batch = r.micro_batch;
    c.res.mode = requested_groups == 1 ? "ulysses" : "basp";
    c.res.groups = c.info.num_groups;
    c.res.k = c.info.group_size;
    c.res.seq_len = r.seq_len;
    c.res.bytes = r.bytes;
    c.per_peer = static_cast<int>(r.bytes / c.info.group_size);
    // The bare all-to-all runs over the same ranks the plan exchanges with.
    MPI_Comm_split(world_, c.info.group_index, c.info.group_position, &c.group.comm);
    return true;
  }

  void run_op(Config& c, int which) {
    const void* in[] = {seq_in_.get()};
    void* mid[] = {head_buffer(c)};
    const void* mid_c[] = {head_buffer(c)};
    void* back[] = {seq_back_.get()};
    if (which == 0) {
      c.plan.scatter(in, mid);
    } else if (which == 1) {
      c.plan.gather(mid_c, back);
    } else {
      MPI_Alltoall(a2a_send_.get(), c.per_peer, MPI_BYTE, a2a_recv_.get(), c.per_peer, MPI_BYTE, c.group.comm);
    }
  }

  // One scatter and one gather on data that is a function of global coordinates; returns the wrong elements.
  int64_t check(Config& c) {
    const RankPlace place = rank_place(c.info, o_.layout, c.res.seq_len);
    const Shard seq = seq_shard(place, elem_, o_.head_dim, o_.heads);
    const Shard head = head_shard(place, elem_, o_.head_dim, o_.heads, 0);
    fill_expected(seq, kSeed, 0, seq_in_.get());
    memory_->fill(head_buffer(c), kCheckPoison, static_cast<size_t>(head.bytes()));
    memory_->fill(seq_back_.get(), kCheckPoison, static_cast<size_t>(seq.bytes()));
    run_op(c, 0);
    run_op(c, 1);
    int64_t wrong = count_wrong(head, kSeed, 0, head_buffer(c)) + count_wrong(seq, kSeed, 0, seq_back_.get());
    c.res.path = c.plan.info().last_path;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, world_);
    c.res.wrong = wrong;
    return wrong;
  }

  // Every run visits every configuration and every operation, both in rotating order, so slow drifts of the
  // machine's load spread over all of them instead of biasing one.
  void time_all() {
    const size_t n = configs_.size();
    for (int32_t i = 0; i < o_.warmup; ++i) {
      for (auto& c : configs_) {
        for (int which = 0; which < 3; ++which) run_op(*c, which);
      }
    }
    for (int32_t run = 0; run < o_.runs; ++run) {
      for (size_t ci = 0; ci < n; ++ci) {
        Config& c = *configs_[(ci + static_cast<size_t>(run)) % n];
        for (int i = 0; i < 3; ++i) {
          const int which = (run + i) % 3;
          MPI_Barrier(world_);
          const double t0 = MPI_Wtime();
          run_op(c, which);
          double t = MPI_Wtime() - t0;
          MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world_);
          c.times[which].push_back(t);
        }
      }
    }
    for (auto& c : configs_) {
      c->res.scatter_ms = median(c->times[0]) * 1e3;
      c->res.gather_ms = median(c->times[1]) * 1e3;
      c->res.alltoall_ms = median(c->times[2]) * 1e3;
    }
  }

  // Every run's time, for the spread behind each median.
  static std::string runs_json(const Config& c) {
    std::string out;
    const char* names[] = {"scatter_runs_ms", "gather_runs_ms", "alltoall_runs_ms"};
    for (int w = 0; w < 3; ++w) {
      out += std::string(", \"") + names[w] + "\": [";
      for (size_t i = 0; i < c.times[w].size(); ++i) out += (i ? ", " : "") + json_number(c.times[w][i] * 1e3);
      out += "]";
    }
    return out;
  }

  void write_json(int64_t total_wrong) const {
    if (rank_ != 0 || o_.json_path.empty()) return;
    std::ofstream out(o_.json_path);
    out << "{\n  \"program\": \"" << kProgram << "\",\n  \"date\": " << json_string(utc_date())
        << ",\n  \"nranks\": " << size_ << ",\n  \"backend\": \"mpi\",\n  \"heads\": " << o_.heads
        << ",\n  \"head_dim\": " << o_.head_dim << ",\n  \"dtype\": " << json_string(dtype_name(o_.dtype))
        << ",\n  \"layout\": " << json_string(layout_name(o_.layout)) << ",\n  \"runs\": " << o_.runs
        << ",\n  \"warmup\": " << o_.warmup << ",\n  \"mpi_transport\": " << json_string(transport_env())
        << ",\n  \"memory\": " << json_string(o_.shared_memory ? "shared" : "host") << ",\n  \"results\": [";
    for (size_t i = 0; i < configs_.size(); ++i) {
      const Result& r = configs_[i]->res;
      out << (i ? ",\n" : "\n") << "    {\"B\": " << r.micro_batch << ", \"mode\": " << json_string(r.mode)
          << ", \"G\": " << r.groups << ", \"K\": " << r.k << ", \"S\": " << r.seq_len << ", \"size\": " << r.bytes
          << ", \"scatter_ms\": " << json_number(r.scatter_ms) << ", \"gather_ms\": " << json_number(r.gather_ms)
          << ", \"alltoall_ms\": " << json_number(r.alltoall_ms) << runs_json(*configs_[i])
          << ", \"wrong\": " << (r.wrong < 0 ? std::string("null") : std::to_string(r.wrong))
          << ", \"path\": " << json_string(path_name(r.path)) << "}";
    }
    out << "\n  ],\n  \"out_of_bounds\": " << (o_.check ? std::to_string(total_wrong) : std::string("null")) << "\n}\n";
  }

  CostOptions o_;
  MPI_Comm world_;
  int rank_ = 0;
  int size_ = 1;
  int64_t elem_ = 0;
  std::vector<RowShape> rows_;
  std::unique_ptr<MemoryContext> memory_;
  Buffer seq_in_, head_out_, seq_back_, a2a_send_, a2a_recv_;
  std::vector<std::unique_ptr<Config>> configs_;
};

}  // namespace
}  // namespace basp::bench

int main(int argc, char** argv) {
  basp::bench::CostOptions o;
  basp::bench::StudyOptions options = basp::bench::cost_options(o);
  return basp::bench::mpi_study_main(basp::bench::kProgram, argc, argv, options,
                                     [&] { return basp::bench::LayoutCost(o, MPI_COMM_WORLD).run(); });
}
