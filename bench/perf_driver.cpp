// The shared driver of the perf binaries (nccl-tests' common.cu): parse, allocate once for the largest size,
// then for each micro-batch B and size: create the plans of each mode through the public C ABI, warm up, time
// the iterations, check one more iteration bit-exactly, print a row. Everything an operation changes is in its
// PerfOp (perf_op.h).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "basp/basp.hpp"
#include "perf_check.h"
#include "perf_json.h"
#include "perf_memory.h"
#include "perf_mpi.h"
#include "perf_op.h"
#include "perf_shape.h"
#include "perf_table.h"

namespace basp::bench {
namespace {

constexpr uint64_t kSeed = 0x6261737062656e63ull;  // any fixed value: the data only has to be known to the check

struct ModeSetup {
  Mode mode;
  std::string name;
  int32_t requested_groups;  // 1 = Ulysses, -1 = gcd rule
};

// The buffers of one exchange: per tensor, the input and output at the largest size of the sweep.
struct ExchangeBuffers {
  std::vector<Buffer> inputs;
  std::vector<Buffer> outputs;
  std::vector<const void*> input_ptrs;
  std::vector<void*> output_ptrs;
};

class Driver {
 public:
  Driver(const PerfOp& op, PerfOptions options, MPI_Comm world) : op_(op), o_(std::move(options)), world_(world) {
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    exchanges_ = op_.exchanges(o_);
    elem_ = static_cast<int64_t>(basp_dtype_size(o_.dtype));
    if (o_.mode != Mode::kBasp) modes_.push_back({Mode::kUlysses, "ulysses", 1});
    if (o_.mode != Mode::kUlysses) modes_.push_back({Mode::kBasp, "basp", -1});
  }

  // Throws ArgError for shapes the options cannot describe.
  void plan_rows() {
    token_bytes_ = bytes_per_token(exchanges_, o_.head_dim, elem_);
    rows_ = shape_rows(size_sweep(o_), o_.micro_batches, size_, token_bytes_, elem_);
  }

  int run() {
    if (!all_succeed(world_, op_.program, [&] { setup_memory(); })) return 3;
    print_preamble();
    for (int64_t b : o_.micro_batches) {
      std::vector<basp::Comm> comms(modes_.size());
      std::vector<basp::RankInfo> groups(modes_.size());
      const bool ok = all_succeed(world_, op_.program, [&] {
        for (size_t m = 0; m < modes_.size(); ++m) {
          comms[m] = make_comm(b, modes_[m]);
          groups[m] = comms[m].query(0);
        }
      });
      if (!ok) return 3;
      std::string line = "# B = " + std::to_string(b) + ":";
      for (size_t m = 0; m < modes_.size(); ++m) {
        line += (m ? " | " : " ") + modes_[m].name + " G=" + std::to_string(groups[m].num_groups) +
                " K=" + std::to_string(groups[m].group_size);
      }
      print(line + "\n");
      for (const RowShape& r : rows_) {
        if (r.micro_batch != b) continue;
        TableRow row;
        row.bytes = r.bytes;
        row.count = r.count;
        row.type = dtype_name(o_.dtype);
        row.micro_batch = b;
        row.seq_len = r.seq_len;
        for (size_t m = 0; m < modes_.size(); ++m) {
          ModeResult res;
          if (!measure(comms[m], r, res)) return 3;
          row.modes.push_back(res);
          record(modes_[m].name, r, res);
        }
        print(table_row(row));
        if (row.modes.size() == 2 && row.modes[0].time_us > 0 && row.modes[1].time_us > 0) {
          ratios_.push_back(row.modes[0].time_us / row.modes[1].time_us);
        }
      }
    }
    finish();
    return o_.check && wrong_ > 0 ? 1 : 0;
  }

 private:
  void print(const std::string& text) const {
    if (rank_ == 0) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
  }

  void setup_memory() {
    if (o_.backend == BASP_BACKEND_NCCL) {
#if !BASP_HAVE_NCCL
      throw std::runtime_error(
          "--backend nccl: this libbasp was built without the NCCL backend (BASP_HAVE_NCCL is 0 in basp/config.h); "
          "rebuild it with CUDA and NCCL, or use --backend mpi");
#endif
      memory_ = make_cuda_memory(local_rank(world_));
    } else {
      memory_ = make_host_memory();
    }
    int64_t max_tokens = 0;
    for (const RowShape& r : rows_) max_tokens = std::max(max_tokens, r.tokens_per_rank);
    for (const Exchange& e : exchanges_) {
      ExchangeBuffers buf;
      for (int64_t h : e.heads) {
        const auto bytes = static_cast<size_t>(max_tokens * h * o_.head_dim * elem_);
        buf.inputs.emplace_back(*memory_, bytes);
        buf.outputs.emplace_back(*memory_, bytes);
        buf.input_ptrs.push_back(buf.inputs.back().get());
        buf.output_ptrs.push_back(buf.outputs.back().get());
      }
      buffers_.push_back(std::move(buf));
    }
  }

  basp::Comm make_comm(int64_t micro_batch, const ModeSetup& mode) const {
    basp::CommConfig cfg;
    cfg.micro_batch = micro_batch;
    cfg.num_groups = mode.requested_groups;
    cfg.backend = o_.backend;
    cfg.placement = o_.placement;
    try {
      return basp::Comm::from_mpi(MPI_Comm_c2f(world_), cfg);
    } catch (const basp::Error& e) {
      throw std::runtime_error(std::string("creating the ") + mode.name + " communicator (B = " +
                               std::to_string(micro_batch) + ", --backend " + backend_name(o_.backend) +
                               ", --placement " + placement_name(o_.placement) + "): " + e.what());
    }
  }

  void print_preamble() {
    const std::string ranks = rank_lines(world_);
    std::string p;
    p += "# " + std::string(op_.program) + ": " + op_.description + "\n";
    p += "# nranks " + std::to_string(size_) + " backend " + backend_name(o_.backend) + " placement " +
         placement_name(o_.placement) + " layout " + layout_name(o_.layout) + " heads " + std::to_string(o_.heads) +
         " kv-heads " + std::to_string(o_.kv_heads) + " head-dim " + std::to_string(o_.head_dim) + " type " +
         dtype_name(o_.dtype) + " mode " + mode_name(o_.mode) + "\n";
    const std::string step =
        o_.step_factor > 1 ? std::to_string(o_.step_factor) + "(factor)" : std::to_string(o_.step_bytes) + "(bytes)";
    p += "# minBytes " + std::to_string(o_.min_bytes) + " maxBytes " + std::to_string(o_.max_bytes) + " step: " + step +
         " warmup iters: " + std::to_string(o_.warmup_iters) + " iters: " + std::to_string(o_.iters) +
         " validation: " + std::to_string(o_.check) + " blocking: " + std::to_string(o_.blocking) +
         " graph: " + std::to_string(o_.graph_launches) + " average: " + std::to_string(o_.average) + "\n";
    p += "# size = bytes per rank of " + std::string(op_.size_meaning) + "; busbw = algbw * (K-1)/K\n";
    if (o_.backend == BASP_BACKEND_MPI) {
      const char* path = std::getenv("BASP_MPI_TRANSPORT");
      p += std::string("# MPI backend (BASP_MPI_TRANSPORT=") + (path ? path : "auto") +
           "): every call completes before it returns (-z has no effect)\n";
    }
    p += "# " + utc_date() + "\n#\n# Using ranks:\n" + ranks + "#\n";
    std::vector<std::string> names;
    for (const ModeSetup& m : modes_) names.push_back(m.name);
    p += table_header(names);
    print(p);
  }

  void iteration(std::vector<basp::Plan>& plans) {
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      ExchangeBuffers& buf = buffers_[e];
      if (exchanges_[e].direction == Direction::kScatter) {
        plans[e].scatter(buf.input_ptrs.data(), buf.output_ptrs.data(), memory_->stream());
      } else {
        plans[e].gather(buf.input_ptrs.data(), buf.output_ptrs.data(), memory_->stream());
      }
    }
  }

  // Per-rank seconds of one iteration.
  double time_iterations(std::vector<basp::Plan>& plans) {
    for (int32_t i = 0; i < o_.warmup_iters; ++i) iteration(plans);
    memory_->synchronize();
    if (o_.graph_launches > 0) {
      memory_->capture_graph([&] {
        for (int32_t i = 0; i < o_.iters; ++i) iteration(plans);
      });
      MPI_Barrier(world_);
      const double t0 = MPI_Wtime();
      for (int32_t g = 0; g < o_.graph_launches; ++g) {
        memory_->launch_graph();
        if (o_.blocking) memory_->synchronize();
      }
      memory_->synchronize();
      const double seconds = MPI_Wtime() - t0;
      memory_->release_graph();
      return seconds / (static_cast<double>(o_.iters) * o_.graph_launches);
    }
    MPI_Barrier(world_);
    const double t0 = MPI_Wtime();
    for (int32_t i = 0; i < o_.iters; ++i) {
      iteration(plans);
      if (o_.blocking) memory_->synchronize();
    }
    memory_->synchronize();
    return (MPI_Wtime() - t0) / o_.iters;
  }

  // Fills the inputs, poisons the outputs, runs one iteration and counts wrong output elements on this rank.
  int64_t check_iteration(std::vector<basp::Plan>& plans, const basp::RankInfo& info) {
    std::vector<Shard> in_shards, out_shards;
    std::vector<unsigned char> staging;
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      const Exchange& ex = exchanges_[e];
      for (size_t t = 0; t < ex.heads.size(); ++t) {
        const Shard seq = seq_shard(info, o_.layout, elem_, o_.head_dim, ex.heads[t]);
        const Shard head = head_shard(info, o_.layout, elem_, o_.head_dim, ex.heads[t]);
        const bool scatter = ex.direction == Direction::kScatter;
        const Shard& in = scatter ? seq : head;
        const Shard& out = scatter ? head : seq;
        const int64_t id = static_cast<int64_t>(e) * BASP_MAX_TENSORS + static_cast<int64_t>(t);
        void* in_buf = buffers_[e].inputs[t].get();
        if (memory_->host_accessible()) {
          fill_expected(in, kSeed, id, in_buf);
        } else {
          staging.resize(static_cast<size_t>(in.bytes()));
          fill_expected(in, kSeed, id, staging.data());
          memory_->copy_to_buffer(in_buf, staging.data(), staging.size());
        }
        memory_->fill(buffers_[e].outputs[t].get(), kCheckPoison, static_cast<size_t>(out.bytes()));
      }
    }
    iteration(plans);
    memory_->synchronize();
    int64_t wrong = 0;
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      const Exchange& ex = exchanges_[e];
      for (size_t t = 0; t < ex.heads.size(); ++t) {
        const bool scatter = ex.direction == Direction::kScatter;
        const Shard out = scatter ? head_shard(info, o_.layout, elem_, o_.head_dim, ex.heads[t])
                                  : seq_shard(info, o_.layout, elem_, o_.head_dim, ex.heads[t]);
        const int64_t id = static_cast<int64_t>(e) * BASP_MAX_TENSORS + static_cast<int64_t>(t);
        const auto bytes = static_cast<size_t>(out.bytes());
        unsigned char* host = nullptr;
        if (memory_->host_accessible()) {
          host = static_cast<unsigned char*>(buffers_[e].outputs[t].get());
        } else {
          staging.resize(bytes);
          memory_->copy_to_host(staging.data(), buffers_[e].outputs[t].get(), bytes);
          host = staging.data();
        }
        if (e == 0 && t == 0 && o_.corrupt > 0) {
          // Test hook: damage the result the way a wrong offset would, so a test can see the check fail.
          for (size_t i = 0; i < std::min(bytes, static_cast<size_t>(o_.corrupt)); ++i) host[i] ^= 0xFF;
        }
        wrong += count_wrong(out, kSeed, id, host);
      }
    }
    return wrong;
  }

  // Plans (collective), timing and check of one mode at one row. False after an error was printed.
  bool measure(basp::Comm& comm, const RowShape& r, ModeResult& res) {
    std::vector<basp::Plan> plans;
    basp::RankInfo info;
    const bool created = all_succeed(world_, op_.program, [&] {
      info = comm.query(r.seq_len);
      for (const Exchange& e : exchanges_) {
        basp::PlanDesc desc;
        desc.layout = o_.layout;
        desc.dtype = o_.dtype;
        desc.seq_len = r.seq_len;
        desc.head_dim = o_.head_dim;
        desc.num_tensors = static_cast<int32_t>(e.heads.size());
        for (size_t t = 0; t < e.heads.size(); ++t) desc.num_heads[t] = e.heads[t];
        try {
          plans.emplace_back(comm, desc);
        } catch (const basp::Error& err) {
          throw std::runtime_error("creating the plan (B = " + std::to_string(r.micro_batch) +
                                   ", S = " + std::to_string(r.seq_len) + ", K = " + std::to_string(info.group_size) +
                                   "): " + err.what());
        }
        // The check's shapes come from plain formulas; they must agree with the library's view of the plan.
        const basp::PlanInfo pi = plans.back().info();
        for (size_t t = 0; t < e.heads.size(); ++t) {
          const int64_t expect = seq_shard(info, o_.layout, elem_, o_.head_dim, e.heads[t]).elements();
          if (pi.seq_sharded_elems[t] != expect || pi.head_sharded_elems[t] != expect) {
            throw std::runtime_error("plan query disagrees with the benchmark's shape: tensor " + std::to_string(t) +
                                     " has " + std::to_string(pi.seq_sharded_elems[t]) + " elements, expected " +
                                     std::to_string(expect));
          }
        }
      }
    });
    if (!created) return false;
    res.num_groups = info.num_groups;
    res.group_size = info.group_size;
    // Failures from here on happen inside collectives: abort rather than leave other ranks waiting.
    try {
      const double seconds = combine_time(world_, time_iterations(plans), o_.average);
      res.time_us = seconds * 1e6;
      res.algbw = algbw_gbs(r.bytes, seconds);
      res.busbw = busbw_gbs(res.algbw, info.group_size);
      if (o_.check) {
        int64_t wrong = check_iteration(plans, info);
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, world_);
        res.wrong = wrong;
        wrong_ += wrong;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: rank %d: error: %s\n", op_.program, rank_, e.what());
      MPI_Abort(world_, 3);
    }
    busbw_sum_ += res.busbw;
    ++busbw_count_;
    return true;
  }

  void record(const std::string& mode, const RowShape& r, const ModeResult& res) {
    JsonRecord j;
    j.mode = mode;
    j.micro_batch = r.micro_batch;
    j.num_groups = res.num_groups;
    j.group_size = res.group_size;
    j.seq_len = r.seq_len;
    j.bytes = r.bytes;
    j.count = r.count;
    j.time_us = res.time_us;
    j.algbw = res.algbw;
    j.busbw = res.busbw;
    j.wrong = res.wrong;
    records_.push_back(j);
  }

  void finish() {
    const double avg_busbw = busbw_count_ ? busbw_sum_ / busbw_count_ : 0.0;
    std::string footer = table_footer(wrong_, o_.check != 0, avg_busbw);
    if (!ratios_.empty()) {
      // Geometric mean: ratios multiply, and one latency-bound row (K = 1 at a tiny size) must not dominate.
      double log_sum = 0;
      for (double x : ratios_) log_sum += std::log(x);
      char buf[96];
      std::snprintf(buf, sizeof buf, "# Avg Ulysses/BASP time ratio : %.3f (geometric mean)\n#\n",
                    std::exp(log_sum / static_cast<double>(ratios_.size())));
      footer += buf;
    }
    print(footer);
    if (rank_ != 0 || o_.json_path.empty()) return;
    std::string batches;
    for (int64_t b : o_.micro_batches) batches += (batches.empty() ? "" : ", ") + std::to_string(b);
    const std::vector<std::pair<std::string, std::string>> header = {
        {"program", json_string(op_.program)},
        {"operation", json_string(op_.description)},
        {"size_meaning", json_string(op_.size_meaning)},
        {"date", json_string(utc_date())},
        {"nranks", std::to_string(size_)},
        {"backend", json_string(backend_name(o_.backend))},
        {"placement", json_string(placement_name(o_.placement))},
        {"layout", json_string(layout_name(o_.layout))},
        {"dtype", json_string(dtype_name(o_.dtype))},
        {"heads", std::to_string(o_.heads)},
        {"kv_heads", std::to_string(o_.kv_heads)},
        {"head_dim", std::to_string(o_.head_dim)},
        {"micro_batches", "[" + batches + "]"},
        {"iters", std::to_string(o_.iters)},
        {"warmup_iters", std::to_string(o_.warmup_iters)},
        {"average", std::to_string(o_.average)},
        {"blocking", std::to_string(o_.blocking)},
        {"graph_launches", std::to_string(o_.graph_launches)},
        {"mpi_transport", json_string(std::getenv("BASP_MPI_TRANSPORT") ? std::getenv("BASP_MPI_TRANSPORT") : "auto")},
    };
    std::ofstream out(o_.json_path);
    out << perf_json(header, records_, wrong_, o_.check != 0, avg_busbw);
    if (!out) std::fprintf(stderr, "%s: error: could not write -J (%s)\n", op_.program, o_.json_path.c_str());
  }

  const PerfOp& op_;
  PerfOptions o_;
  MPI_Comm world_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Exchange> exchanges_;
  std::vector<ModeSetup> modes_;
  int64_t elem_ = 0;
  int64_t token_bytes_ = 0;
  std::vector<RowShape> rows_;
  std::unique_ptr<MemoryContext> memory_;
  std::vector<ExchangeBuffers> buffers_;
  int64_t wrong_ = 0;
  double busbw_sum_ = 0;
  int64_t busbw_count_ = 0;
  std::vector<double> ratios_;
  std::vector<JsonRecord> records_;
};

int run(int argc, char** argv, const PerfOp& op) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PerfOptions options;
  try {
    options = parse_perf_args(argc, argv);
  } catch (const ArgError& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", op.program, e.what());
    return 2;
  }
  if (options.help) {
    if (rank == 0) std::fputs(perf_usage(op.program).c_str(), stdout);
    return 0;
  }
  Driver driver(op, options, MPI_COMM_WORLD);
  try {
    driver.plan_rows();
  } catch (const ArgError& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", op.program, e.what());
    return 2;
  }
  return driver.run();
}

}  // namespace

int perf_main(int argc, char** argv, const PerfOp& op) {
  MPI_Init(&argc, &argv);
  const int code = run(argc, argv, op);
  MPI_Finalize();
  return code;
}

}  // namespace basp::bench
