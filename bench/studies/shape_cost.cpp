// basp_shape_cost: the price of uneven shapes. For each case (uneven heads, uneven tokens, grouped-query attention,
// packed documents, multi-query attention), over one group of all N ranks (K = N), times basp_scatter and
// basp_gather of one plan against a bare MPI_Alltoallv that moves the same bytes between the same ranks (each
// rank's per-peer counts from tensor_split's formulas, its own block included, as the library's local copy). For
// multi-query attention (one KV head, replicated to every rank) it also times ALST-style replication through the
// library's uniform path: the KV tensors expanded to K heads in memory, then a uniform scatter; and the uniform
// gather of the K replicas' gradients, then their sum. For multi-head latent attention (Q and K of 192 elements per
// head, V of 128) it also times the same tensors through two plans of one head size each (Q and K, then V): what a
// caller without per-tensor head sizes would run; those pairs alternate which goes first from run to run, and each
// run's ratio (one exchange / two plans) is kept. A control case (mha-16) runs the same two plans over tensors of one
// head size, where a second plan is not needed. Every run times every case and operation in an order that
// rotates from run to run; one run's time is the slowest rank's; medians over the runs. Before timing, every
// exchange (and the ALST and two-plan variants) is checked bit-exactly, and each plan's bytes_sent_per_exchange
// against the routing minimum computed here.
//
// usage: mpirun -np 8 basp_shape_cost [-b 16M] [-n 10] [-w 2] [-r 1] [-d bf16] [-c 1] [--cases a,b] [-J results.json]
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

constexpr const char* kProgram = "basp_shape_cost";
constexpr uint64_t kSeed = 0x7368617065ull;

// The cases, in the order they are printed.
struct CaseSpec {
  const char* name;
  const char* what;
  basp_layout_t layout;
  std::vector<Tensor> tensors;  // scattered and gathered by one plan
  bool alst;                    // also time ALST-style replication (every KV tensor has one head)
  // Also time the tensors through one plan per group (indices into tensors; each group of one head size).
  std::vector<std::vector<size_t>> split = {};
};

// Multi-head latent attention's Q, K, V (DeepSeek-V2, V3): Hq = Hkv, Q and K at 192, V at 128.
std::vector<Tensor> mla_tensors(int64_t heads) {
  return {{"Q", heads, 0, kMlaHeadDims[0]}, {"K", heads, heads, kMlaHeadDims[1]}, {"V", heads, heads, kMlaHeadDims[2]}};
}

std::vector<CaseSpec> all_cases() {
  return {
      {"uniform", "Hq 32, S a multiple of N (the textbook shape)", BASP_LAYOUT_BSHD, {{"Q", 32, 0}}, false},
      {"uneven-heads", "Hq 36, S a multiple of N", BASP_LAYOUT_BSHD, {{"Q", 36, 0}}, false},
      {"uneven-tokens", "Hq 32, S mod N = N/2 - 1", BASP_LAYOUT_BSHD, {{"Q", 32, 0}}, false},
      {"gqa-llama-3.1-8b",
       "Q, K, V: Hq 32, Hkv 8",
       BASP_LAYOUT_BSHD,
       {{"Q", 32, 0}, {"K", 8, 32}, {"V", 8, 32}},
       false},
      {"gqa-qwen2.5-7b", "Q, K, V: Hq 28, Hkv 4", BASP_LAYOUT_BSHD, {{"Q", 28, 0}, {"K", 4, 28}, {"V", 4, 28}}, false},
      {"thd", "Hq 32, one packed stream of long-tail documents", BASP_LAYOUT_THD, {{"Q", 32, 0}}, false},
      {"mqa", "Q, K, V: Hq 32, Hkv 1", BASP_LAYOUT_BSHD, {{"Q", 32, 0}, {"K", 1, 32}, {"V", 1, 32}}, true},
      {"mla-16",
       "MLA Q, K, V: 16 heads, Q, K at 192, V at 128",
       BASP_LAYOUT_BSHD,
       mla_tensors(16),
       false,
       {{0, 1}, {2}}},
      {"mla-128",
       "MLA Q, K, V: 128 heads, Q, K at 192, V at 128",
       BASP_LAYOUT_BSHD,
       mla_tensors(128),
       false,
       {{0, 1}, {2}}},
      // The MLA cases' control: one head size, the same two plans (Q and K, then V); what one exchange against two
      // costs when no tensor needs a head size of its own.
      {"mha-16",
       "Q, K, V: 16 heads at D (MLA's control)",
       BASP_LAYOUT_BSHD,
       {{"Q", 16, 0}, {"K", 16, 16}, {"V", 16, 16}},
       false,
       {{0, 1}, {2}}},
  };
}

struct CostOptions {
  int64_t bytes = 16 << 20;
  int32_t runs = 10;
  int32_t warmup = 2;
  int32_t reps = 1;  // executions per timed sample
  basp_dtype_t dtype = BASP_DTYPE_BF16;
  int32_t check = 1;
  int64_t head_dim = 128;
  std::vector<std::string> cases;  // empty: all
  std::string json_path;
};

constexpr const char* kUsage =
    "usage: mpirun -np 8 basp_shape_cost [options]\n"
    "  -b <size>         bytes per rank of each case's sequence-sharded tensors, on average (K/M/G), default 16M\n"
    "  -n <runs>         timed runs of every case and operation, default 10\n"
    "  -w <n>            untimed rounds before timing, default 2\n"
    "  -r <n>            executions per timed sample (its time is their mean), default 1\n"
    "  -d <type>         element type: fp16, bf16, fp32 or fp64 (the gathers sum replicated heads), default bf16\n"
    "  --head-dim <n>    head dimension D, default 128 (the mla cases have their own: Q, K 192, V 128)\n"
    "  -c <0|1>          check every exchange bit-exactly before timing, default 1\n"
    "  --cases <list>    uniform, uneven-heads, uneven-tokens, gqa-llama-3.1-8b, gqa-qwen2.5-7b, thd, mqa,\n"
    "                    mla-16, mla-128, mha-16; default all\n"
    "  -J <file>         also write the results as JSON\n";

// The command line into `o`.
StudyOptions cost_options(CostOptions& o) {
  StudyOptions options(kUsage);
  options.value("-b", [&](const std::string& v) { o.bytes = parse_size(v, "-b"); })
      .value("-n", [&](const std::string& v) { o.runs = static_cast<int32_t>(parse_int(v, "-n", 1, 100000)); })
      .value("-w", [&](const std::string& v) { o.warmup = static_cast<int32_t>(parse_int(v, "-w", 0, 100000)); })
      .value("-r", [&](const std::string& v) { o.reps = static_cast<int32_t>(parse_int(v, "-r", 1, 100000)); })
      .value("-d",
             [&](const std::string& v) {
               o.dtype = parse_dtype(v);
               if (!summable(o.dtype))
                 throw ArgError("-d ('" + v + "'): the gathers sum replicated heads: fp16, bf16, fp32 or fp64");
             })
      .value("--head-dim", [&](const std::string& v) { o.head_dim = parse_int(v, "--head-dim", 1, 1 << 20); })
      .value("-c", [&](const std::string& v) { o.check = static_cast<int32_t>(parse_int(v, "-c", 0, 1)); })
      .value("--cases",
             [&](const std::string& v) {
               size_t start = 0;
               while (true) {
                 const size_t comma = v.find(',', start);
                 const std::string name =
                     v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
                 bool known = false;
                 for (const CaseSpec& c : all_cases()) known = known || name == c.name;
                 if (!known) throw ArgError("--cases ('" + v + "'): unknown case '" + name + "' (see --help)");
                 o.cases.push_back(name);
                 if (comma == std::string::npos) break;
                 start = comma + 1;
               }
             })
      .value("-J", [&](const std::string& v) { o.json_path = v; });
  return options;
}

// The operations of a case: the library's two, the bare all-to-alls with the same counts, ALST's two, the two
// directions through one plan per head size.
enum Op { kScatter, kGather, kA2avScatter, kA2avGather, kAlstScatter, kAlstGather, kSplitScatter, kSplitGather, kOps };
const char* const kOpNames[kOps] = {"scatter",      "gather",      "alltoallv_scatter", "alltoallv_gather",
                                    "alst_scatter", "alst_gather", "split_scatter",     "split_gather"};

// A tensor's buffers: the sequence-sharded and the head-sharded form.
struct TensorBuffers {
  Buffer seq, head;
};

struct GroupComm {
  MPI_Comm comm = MPI_COMM_NULL;
  ~GroupComm() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

struct Case {
  CaseSpec spec;
  int64_t seq_len = 0;  // S; THD: the stream's T
  int64_t docs = 0;     // THD: documents in the stream
  basp::Comm comm;
  basp::Plan plan;
  basp::RankInfo info;
  GroupComm group;  // the group's ranks ordered by position, for MPI_Alltoallv
  RankPlace place;
  std::vector<TensorBuffers> bufs;
  std::vector<int> to, from, to_displ, from_displ;  // MPI_Alltoallv counts and displacements, bytes
  int64_t row_min = 0, row_max = 0;                 // the contiguous rows the exchange moves, bytes
  int64_t rank_bytes_max = 0;                       // the largest rank's sequence-sharded bytes
  int64_t sent_max = 0;                             // bytes_sent_per_exchange, largest rank
  int64_t sent_min = 0;
  int32_t path = BASP_PATH_NONE;
  int64_t wrong = -1;
  // ALST: the uniform plan over expanded tensors (KV tensors of K heads), its buffers, its bytes sent.
  basp::Plan alst_plan;
  std::vector<TensorBuffers> alst_bufs;
  int64_t alst_sent_max = 0;
  int64_t alst_extra_bytes = 0;  // the expanded copies a rank holds beyond the library's tensors
  // One plan per head size over the same buffers: its plans and, for each, the tensors (indices) it moves.
  std::vector<basp::Plan> split_plans;
  std::vector<std::vector<size_t>> split_tensors;
  std::vector<double> times[kOps];
  Case() = default;
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;
};

// bf16/fp16/fp32/fp64 to float and back (round to nearest even): ALST's local sum of the replicas, in FP32 in
// ascending position as the library sums (FP64 in FP64).
float load_float(basp_dtype_t dtype, const unsigned char* p) {
  if (dtype == BASP_DTYPE_FP32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == BASP_DTYPE_BF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // FP16: only the values the check and the timing use (normal numbers and zero) need to be right here.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const uint32_t u = e == 0 ? sign : sign | ((e + 112) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void store_float(basp_dtype_t dtype, float f, unsigned char* p) {
  if (dtype == BASP_DTYPE_FP32) {
    std::memcpy(p, &f, 4);
    return;
  }
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t h;
  if (dtype == BASP_DTYPE_BF16) {
    h = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  } else {
    const uint32_t a = x & 0x7fffffffu;
    uint32_t r = a < 0x38800000u ? 0 : (a >> 13) - (112u << 10);
    const uint32_t rem = a & 0x1fffu;
    if (a >= 0x38800000u && (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))) ++r;
    h = static_cast<uint16_t>(((x >> 16) & 0x8000u) | r);
  }
  std::memcpy(p, &h, 2);
}

class ShapeCost {
 public:
  ShapeCost(const CostOptions& o, MPI_Comm world) : o_(o), world_(world) {
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    elem_ = static_cast<int64_t>(basp_dtype_size(o_.dtype));
  }

  int run() {
    memory_ = make_host_memory();
    print("# " + std::string(kProgram) +
          ": basp_scatter and basp_gather of uneven shapes against a bare MPI_Alltoallv of the same per-peer "
          "bytes, one group of all ranks\n# nranks " +
          std::to_string(size_) + " (K = " + std::to_string(size_) + "), " + dtype_name(o_.dtype) + ", head-dim " +
          std::to_string(o_.head_dim) + ", about " + std::to_string(o_.bytes) + " bytes per rank per case, runs " +
          std::to_string(o_.runs) + " (median of the slowest rank's time) of " + std::to_string(o_.reps) +
          " executions each, warmup " + std::to_string(o_.warmup) + ", BASP_MPI_TRANSPORT=" +
          (std::getenv("BASP_MPI_TRANSPORT") ? std::getenv("BASP_MPI_TRANSPORT") : "auto") + "\n# " + utc_date() +
          "\n# every run times every case and operation, in an order that rotates from run to run\n#\n");
    for (const CaseSpec& spec : all_cases()) {
      if (!o_.cases.empty() && std::find(o_.cases.begin(), o_.cases.end(), spec.name) == o_.cases.end()) continue;
      auto c = std::make_unique<Case>();
      c->spec = spec;
      if (!all_succeed(world_, kProgram, [&] { setup(*c); })) return 3;
      cases_.push_back(std::move(c));
    }
    const int64_t total_wrong = check_then_time(
        kProgram, rank_, world_, o_.check, cases_, [&](auto& c) { return check(c); }, [&] { time_all(); });
    print_table();
    print(o_.check ? "# Out of bounds values : " + std::to_string(total_wrong) + (total_wrong ? " FAILED\n" : " OK\n")
                   : std::string("# Out of bounds values : N/A (not checked: -c 0)\n"));
    write_json(total_wrong);
    return total_wrong ? 1 : 0;
  }

 private:
  void print(const std::string& s) const {
    if (rank_ == 0) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }
  }

  int64_t token_bytes(const CaseSpec& spec) const {
    int64_t elements = 0;
    for (const Tensor& t : spec.tensors) elements += t.heads * tensor_head_dim(t, o_.head_dim);
    return elements * elem_;
  }

  // S for the case: the mean bytes per rank near -b, then the case's shape rule.
  int64_t case_seq_len(const CaseSpec& spec, int64_t& docs) const {
    const int64_t n = size_;
    int64_t s = std::max<int64_t>(n, o_.bytes / token_bytes(spec) * n);
    docs = 0;
    if (std::string(spec.name) == "uneven-tokens") return s / n * n + std::max<int64_t>(1, n / 2 - 1);
    if (spec.layout == BASP_LAYOUT_THD) {
      // Long-tail documents (1 to 4096 tokens) until the stream holds about S tokens.
      const std::vector<int64_t> lengths = longtail_lengths(1, 1 << 20, 4096);
      int64_t t = 0;
      while (t < s && docs < static_cast<int64_t>(lengths.size())) t += lengths[static_cast<size_t>(docs++)];
      return t;
    }
    return s / n * n;
  }

  static Buffer& side(TensorBuffers& b, bool seq) { return seq ? b.seq : b.head; }

  void setup(Case& c) {
    c.seq_len = case_seq_len(c.spec, c.docs);
    basp::CommConfig cfg;
    cfg.micro_batch = 1;
    cfg.num_groups = 1;
    c.comm = basp::Comm::from_mpi(MPI_Comm_c2f(world_), cfg);
    const bool thd = c.spec.layout == BASP_LAYOUT_THD;
    c.info = c.comm.query(thd ? 0 : c.seq_len);
    c.place = rank_place(c.info, c.spec.layout, c.seq_len);
    if (thd) {
      c.place.first_sequence = 0;  // the group's index: one group
      c.place.num_sequences = 1;
      // The stream is the documents' (one group holds them all); assign them as a data loader would.
      const std::vector<int64_t> lengths = longtail_lengths(1, c.docs, 4096);
      basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
      basp::check(basp_comm_assign_documents(c.comm.get(), lengths.data(), static_cast<int32_t>(lengths.size()), 0, -1,
                                             &a, nullptr, nullptr, 0));
      if (a.stream_tokens != c.seq_len) throw std::runtime_error("THD stream of " + std::to_string(a.stream_tokens));
      c.place = rank_place(a);
    }
    basp::PlanDesc d;
    d.layout = c.spec.layout;
    d.dtype = o_.dtype;
    d.seq_len = thd ? -1 : c.seq_len;
    d.token_capacity = thd ? c.seq_len : 0;
    d.head_dim = o_.head_dim;
    d.num_tensors = static_cast<int32_t>(c.spec.tensors.size());
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      d.num_heads[t] = c.spec.tensors[t].heads;
      d.query_heads[t] = c.spec.tensors[t].query_heads;
      d.head_dims[t] = c.spec.tensors[t].head_dim;
    }
    c.plan = basp::Plan(c.comm, d);
    MPI_Comm_split(world_, c.info.group_index, c.info.group_position, &c.group.comm);
    // The bytes a rank sends: the plan's figure must be the routing minimum.
    const std::vector<int64_t> to = scatter_bytes_to(c.place, elem_, o_.head_dim, c.spec.tensors);
    const std::vector<int64_t> from = scatter_bytes_from(c.place, elem_, o_.head_dim, c.spec.tensors);
    int64_t minimum = 0;
    for (size_t j = 0; j < to.size(); ++j) minimum += static_cast<int64_t>(j) == c.place.position ? 0 : to[j];
    const basp::PlanInfo pi = c.plan.info();
    if (pi.bytes_sent_per_exchange != minimum) {
      throw std::runtime_error(std::string(c.spec.name) + ": bytes_sent_per_exchange " +
                               std::to_string(pi.bytes_sent_per_exchange) + ", routing minimum " +
                               std::to_string(minimum));
    }
    auto to_int = [](const std::vector<int64_t>& v, std::vector<int>& counts, std::vector<int>& displ) {
      int64_t at = 0;
      for (int64_t x : v) {
        if (x > INT_MAX || at > INT_MAX)
          throw std::runtime_error("MPI_Alltoallv counts above INT_MAX: use a smaller -b");
        counts.push_back(static_cast<int>(x));
        displ.push_back(static_cast<int>(at));
        at += x;
      }
    };
    to_int(to, c.to, c.to_displ);
    to_int(from, c.from, c.from_displ);
    int64_t to_total = 0, from_total = 0;
    for (int64_t x : to) to_total += x;
    for (int64_t x : from) from_total += x;
    a2a_bytes_ = std::max({a2a_bytes_, to_total, from_total});
    ensure(a2a_send_, a2a_bytes_);
    ensure(a2a_recv_, a2a_bytes_);
    // Buffers, and the rows: the heads one position holds of one token, contiguous in the head-sharded tensor.
    c.row_min = INT64_MAX;
    int64_t rank_bytes = 0;
    for (const Tensor& t : c.spec.tensors) {
      const int64_t dim = tensor_head_dim(t, o_.head_dim);
      const Shard seq = seq_shard(c.place, elem_, dim, t.heads);
      const Shard head = head_shard(c.place, elem_, dim, t.heads, t.query_heads);
      c.bufs.emplace_back();
      c.bufs.back().seq = Buffer(*memory_, static_cast<size_t>(seq.bytes()));
      c.bufs.back().head = Buffer(*memory_, static_cast<size_t>(head.bytes()));
      rank_bytes += seq.bytes();
      for (int64_t j = 0; j < size_; ++j) {
        const HeadRange hr = head_range(size_, j, t.heads, t.query_heads);
        const int64_t row = (hr.end - hr.begin) * dim * elem_;
        if (row > 0) c.row_min = std::min(c.row_min, row);
        c.row_max = std::max(c.row_max, row);
      }
    }
    int64_t v[3] = {rank_bytes, pi.bytes_sent_per_exchange, -pi.bytes_sent_per_exchange};
    MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MAX, world_);
    c.rank_bytes_max = v[0];
    c.sent_max = v[1];
    c.sent_min = -v[2];
    if (c.spec.alst) setup_alst(c, d);
    if (!c.spec.split.empty()) setup_split(c, d);
  }

  // One plan per group of tensors of one head size, in their order; together they must send what the one plan
  // sends.
  void setup_split(Case& c, const basp::PlanDesc& all) {
    int64_t sent = 0;
    for (const std::vector<size_t>& group : c.spec.split) {
      const int64_t dim = tensor_head_dim(c.spec.tensors[group[0]], o_.head_dim);
      basp::PlanDesc d = all;
      d.head_dim = dim;
      d.num_tensors = 0;
      c.split_tensors.emplace_back();
      for (size_t t : group) {
        if (tensor_head_dim(c.spec.tensors[t], o_.head_dim) != dim) {
          throw std::logic_error(std::string(c.spec.name) + ": a plan of tensors of different head sizes");
        }
        d.num_heads[d.num_tensors] = all.num_heads[t];
        d.query_heads[d.num_tensors] = all.query_heads[t];
        d.head_dims[d.num_tensors] = 0;
        ++d.num_tensors;
        c.split_tensors.back().push_back(t);
      }
      for (int32_t t = d.num_tensors; t < BASP_MAX_TENSORS; ++t) d.num_heads[t] = d.query_heads[t] = d.head_dims[t] = 0;
      c.split_plans.emplace_back(c.comm, d);
      sent += c.split_plans.back().info().bytes_sent_per_exchange;
    }
    if (sent != c.plan.info().bytes_sent_per_exchange) {
      throw std::runtime_error(std::string(c.spec.name) + ": the plans per head size send " + std::to_string(sent) +
                               " bytes, the one plan " + std::to_string(c.plan.info().bytes_sent_per_exchange));
    }
  }

  void ensure(Buffer& b, int64_t bytes) {
    if (b.get() && static_cast<int64_t>(b.bytes()) >= bytes) return;
    b = Buffer();
    b = Buffer(*memory_, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  }

  // ALST: every one-head KV tensor expanded to K heads, so that the exchange is the uniform one.
  void setup_alst(Case& c, basp::PlanDesc d) {
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      const Tensor& ten = c.spec.tensors[t];
      const int64_t heads = ten.query_heads ? size_ : ten.heads;
      d.num_heads[t] = heads;
      d.query_heads[t] = 0;
      c.alst_bufs.emplace_back();
      if (!ten.query_heads) continue;  // query-like tensors go as they are, through the library's buffers
      const Shard seq = seq_shard(c.place, elem_, o_.head_dim, heads);
      const Shard head = head_shard(c.place, elem_, o_.head_dim, heads, 0);
      c.alst_bufs.back().seq = Buffer(*memory_, static_cast<size_t>(seq.bytes()));
      c.alst_bufs.back().head = Buffer(*memory_, static_cast<size_t>(head.bytes()));
      c.alst_extra_bytes += seq.bytes() - seq_shard(c.place, elem_, o_.head_dim, 1).bytes();
    }
    c.alst_plan = basp::Plan(c.comm, d);
    int64_t sent = c.alst_plan.info().bytes_sent_per_exchange;
    MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_MAX, world_);
    c.alst_sent_max = sent;
  }

  // The buffer tensor t reads or writes in `op`: ALST moves its KV tensors through the expanded buffers, every
  // other tensor through the library's own.
  Buffer& buffer(Case& c, size_t t, int op, bool seq) {
    const bool alst = op == kAlstScatter || op == kAlstGather;
    return side(alst && c.spec.tensors[t].query_heads ? c.alst_bufs[t] : c.bufs[t], seq);
  }

  // The two directions through the plans per head size, one after the other, over the library's buffers.
  void exec_split(Case& c, bool scatter) {
    for (size_t p = 0; p < c.split_plans.size(); ++p) {
      std::vector<const void*> in;
      std::vector<void*> out;
      for (size_t t : c.split_tensors[p]) {
        in.push_back(side(c.bufs[t], scatter).get());
        out.push_back(side(c.bufs[t], !scatter).get());
      }
      basp::check((scatter ? basp_scatter_tokens : basp_gather_tokens)(c.split_plans[p].get(), -1, in.data(),
                                                                       out.data(), nullptr));
    }
  }

  void exec(Case& c, int op) {
    const bool scatter = op == kScatter || op == kAlstScatter;
    std::vector<const void*> in;
    std::vector<void*> out;
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      in.push_back(buffer(c, t, op, scatter).get());
      out.push_back(buffer(c, t, op, !scatter).get());
    }
    basp::Plan& plan = op == kScatter || op == kGather ? c.plan : c.alst_plan;
    const int64_t tokens = c.spec.layout == BASP_LAYOUT_THD ? c.seq_len : -1;
    basp::check(
        (scatter ? basp_scatter_tokens : basp_gather_tokens)(plan.get(), tokens, in.data(), out.data(), nullptr));
  }

  // Expanded [rows, K, D] from [rows, 1, D] (every KV row copied K times), or the sum back over the K heads.
  void expand_kv(Case& c) {
    const int64_t rows = c.place.num_sequences * split_count(c.seq_len, size_, c.place.position);
    const auto dim = static_cast<size_t>(o_.head_dim * elem_);
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      if (!c.spec.tensors[t].query_heads) continue;
      const auto* src = static_cast<const unsigned char*>(c.bufs[t].seq.get());
      auto* dst = static_cast<unsigned char*>(c.alst_bufs[t].seq.get());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < size_; ++h) std::memcpy(dst + (r * size_ + h) * dim, src + r * dim, dim);
      }
    }
  }

  void reduce_kv(Case& c) {
    const int64_t rows = c.place.num_sequences * split_count(c.seq_len, size_, c.place.position);
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      if (!c.spec.tensors[t].query_heads) continue;
      const auto* src = static_cast<const unsigned char*>(c.alst_bufs[t].seq.get());
      auto* dst = static_cast<unsigned char*>(c.bufs[t].seq.get());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t d = 0; d < o_.head_dim; ++d) {
          if (o_.dtype == BASP_DTYPE_FP64) {
            double acc = 0, x;
            for (int64_t h = 0; h < size_; ++h) {
              std::memcpy(&x, src + ((r * size_ + h) * o_.head_dim + d) * 8, 8);
              acc = h == 0 ? x : acc + x;
            }
            std::memcpy(dst + (r * o_.head_dim + d) * 8, &acc, 8);
            continue;
          }
          float acc = 0;
          for (int64_t h = 0; h < size_; ++h) {
            const float x = load_float(o_.dtype, src + ((r * size_ + h) * o_.head_dim + d) * elem_);
            acc = h == 0 ? x : acc + x;
          }
          store_float(o_.dtype, acc, dst + (r * o_.head_dim + d) * elem_);
        }
      }
    }
  }

  void run_op(Case& c, int op) {
    switch (op) {
      case kScatter:
      case kGather: exec(c, op); break;
      case kA2avScatter:
      case kA2avGather: {
        const bool s = op == kA2avScatter;
        MPI_Alltoallv(a2a_send_.get(), (s ? c.to : c.from).data(), (s ? c.to_displ : c.from_displ).data(), MPI_BYTE,
                      a2a_recv_.get(), (s ? c.from : c.to).data(), (s ? c.from_displ : c.to_displ).data(), MPI_BYTE,
                      c.group.comm);
        break;
      }
      case kAlstScatter:
        expand_kv(c);
        exec(c, op);
        break;
      case kAlstGather:
        exec(c, op);
        reduce_kv(c);
        break;
      case kSplitScatter:
      case kSplitGather: exec_split(c, op == kSplitScatter); break;
      default: break;
    }
  }

  // One direction of a case through `op`, on data that is a function of global coordinates. ALST's KV tensors
  // enter and leave through the library's buffers (the one-head forms) but pass through the expanded ones: its
  // scatter output and its gather input are each rank's one-head replica, laid out as the library's head-sharded
  // tensor.
  int64_t check_op(Case& c, Direction dir, int op) {
    const bool scatter = dir == Direction::kScatter;
    std::vector<TensorCheck> checks;
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      checks.push_back(tensor_check(c.place, dir, o_.dtype, o_.head_dim, c.spec.tensors[t]));
      Buffer& in = op == kAlstScatter ? c.bufs[t].seq : buffer(c, t, op, scatter);
      fill_input(checks.back(), kSeed, static_cast<int64_t>(t), in.get());
      Buffer& out = op == kAlstGather ? c.bufs[t].seq : buffer(c, t, op, !scatter);
      std::memset(out.get(), kCheckPoison, static_cast<size_t>(checks.back().output.bytes()));
    }
    run_op(c, op);
    int64_t wrong = 0;
    for (size_t t = 0; t < c.spec.tensors.size(); ++t) {
      Buffer& out = op == kAlstGather ? c.bufs[t].seq : buffer(c, t, op, !scatter);
      wrong += count_wrong_output(checks[t], kSeed, static_cast<int64_t>(t), out.get());
    }
    return wrong;
  }

  int64_t check(Case& c) {
    int64_t wrong = check_op(c, Direction::kScatter, kScatter) + check_op(c, Direction::kGather, kGather);
    c.path = c.plan.info().last_path;
    if (c.spec.alst) {
      wrong += check_op(c, Direction::kScatter, kAlstScatter) + check_op(c, Direction::kGather, kAlstGather);
    }
    if (!c.spec.split.empty()) {
      wrong += check_op(c, Direction::kScatter, kSplitScatter) + check_op(c, Direction::kGather, kSplitGather);
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, world_);
    c.wrong = wrong;
    return wrong;
  }

  // The operations timed for a case, in the order of a run whose index is even. A case with plans per head size
  // runs each of its pairs (one exchange, the plans per head size) back to back, the pair's order swapped on odd
  // runs; the others rotate.
  static std::vector<int> ops_of(const Case& c) {
    if (!c.spec.split.empty()) return {kScatter, kSplitScatter, kGather, kSplitGather, kA2avScatter, kA2avGather};
    if (c.spec.alst) return {kScatter, kGather, kA2avScatter, kA2avGather, kAlstScatter, kAlstGather};
    return {kScatter, kGather, kA2avScatter, kA2avGather};
  }

  static std::vector<int> run_order(const Case& c, int32_t run) {
    std::vector<int> ops = ops_of(c);
    if (!c.spec.split.empty()) {
      if (run % 2 == 1) {
        std::swap(ops[0], ops[1]);
        std::swap(ops[2], ops[3]);
      }
      return ops;
    }
    std::rotate(ops.begin(), ops.begin() + run % static_cast<int32_t>(ops.size()), ops.end());
    return ops;
  }

  void time_all() {
    const size_t n = cases_.size();
    for (int32_t i = 0; i < o_.warmup; ++i) {
      for (auto& c : cases_) {
        for (int op : ops_of(*c)) run_op(*c, op);
      }
    }
    for (int32_t run = 0; run < o_.runs; ++run) {
      for (size_t ci = 0; ci < n; ++ci) {
        Case& c = *cases_[(ci + static_cast<size_t>(run)) % n];
        for (int op : run_order(c, run)) {
          MPI_Barrier(world_);
          const double t0 = MPI_Wtime();
          for (int32_t r = 0; r < o_.reps; ++r) run_op(c, op);
          double t = (MPI_Wtime() - t0) / o_.reps;
          MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world_);
          c.times[op].push_back(t);
        }
      }
    }
  }

  // Each run's ratio of `one` to `other` (the same run's times), sorted.
  static std::vector<double> pair_ratios(const Case& c, int one, int other) {
    std::vector<double> r;
    for (size_t i = 0; i < c.times[one].size() && i < c.times[other].size(); ++i) {
      if (c.times[other][i] > 0) r.push_back(c.times[one][i] / c.times[other][i]);
    }
    std::sort(r.begin(), r.end());
    return r;
  }

  // "0.61 (quartiles 0.58-0.64, range 0.52-0.70, 12 pairs)": the median of sorted ratios and their spread; the
  // quartiles are the medians of the lower and the upper half.
  static std::string ratio_text(const std::vector<double>& r) {
    if (r.empty()) return "N/A";
    const size_t h = r.size() / 2;
    const double q1 =
        median(std::vector<double>(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(std::max<size_t>(h, 1))));
    const double q3 =
        median(std::vector<double>(r.end() - static_cast<std::ptrdiff_t>(std::max<size_t>(h, 1)), r.end()));
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.3f (quartiles %.3f-%.3f, range %.3f-%.3f, %zu pairs)", median(r), q1, q3,
                  r.front(), r.back(), r.size());
    return buf;
  }

  double ms(const Case& c, int op) const { return c.times[op].empty() ? 0.0 : median(c.times[op]) * 1e3; }

  void print_table() const {
    print(
        "#            case     S/T   row(B)      size(B)    sent(B)  scatter(ms) a2av(ms) ratio  gather(ms) "
        "a2av(ms) ratio  #wrong  path\n");
    for (const auto& cp : cases_) {
      const Case& c = *cp;
      const std::string rows = c.row_min == c.row_max ? std::to_string(c.row_min)
                                                      : std::to_string(c.row_min) + "-" + std::to_string(c.row_max);
      char line[320];
      std::snprintf(line, sizeof line, "%17s %8lld %9s %11lld %10lld %12.2f %8.2f %5.2f %11.2f %8.2f %5.2f %7s  %s\n",
                    c.spec.name, static_cast<long long>(c.seq_len), rows.c_str(),
                    static_cast<long long>(c.rank_bytes_max), static_cast<long long>(c.sent_max), ms(c, kScatter),
                    ms(c, kA2avScatter), ms(c, kScatter) / ms(c, kA2avScatter), ms(c, kGather), ms(c, kA2avGather),
                    ms(c, kGather) / ms(c, kA2avGather), c.wrong < 0 ? "N/A" : std::to_string(c.wrong).c_str(),
                    path_name(c.path));
      print(line);
    }
    for (const auto& cp : cases_) {
      const Case& c = *cp;
      if (!c.spec.alst) continue;
      char line[512];
      std::snprintf(line, sizeof line,
                    "#\n# %s against ALST-style replication (KV expanded to K = %d heads, then the uniform exchange)\n"
                    "#   bytes sent per rank: library %lld (the routing minimum), ALST %lld; ALST's expanded copies "
                    "%lld bytes per rank\n"
                    "#   scatter: library %.2f ms, ALST (expand + uniform scatter) %.2f ms, ALST/library %.2f\n"
                    "#   gather:  library %.2f ms (summing), ALST (uniform gather + sum) %.2f ms, ALST/library %.2f\n",
                    c.spec.name, size_, static_cast<long long>(c.sent_max), static_cast<long long>(c.alst_sent_max),
                    static_cast<long long>(c.alst_extra_bytes), ms(c, kScatter), ms(c, kAlstScatter),
                    ms(c, kAlstScatter) / ms(c, kScatter), ms(c, kGather), ms(c, kAlstGather),
                    ms(c, kAlstGather) / ms(c, kGather));
      print(line);
    }
    for (const auto& cp : cases_) {
      const Case& c = *cp;
      if (c.spec.split.empty()) continue;
      std::string plans;
      for (size_t p = 0; p < c.split_plans.size(); ++p) {
        plans += p ? "; " : "";
        for (size_t i = 0; i < c.split_tensors[p].size(); ++i) {
          plans += (i ? ", " : "") + c.spec.tensors[c.split_tensors[p][i]].name;
        }
        plans += " at " + std::to_string(tensor_head_dim(c.spec.tensors[c.split_tensors[p][0]], o_.head_dim));
      }
      print("#\n# " + std::string(c.spec.name) + ": one exchange against one plan per group (" + plans +
            "), the same bytes; each run's one/two ratio, the pair's order alternating\n" + "#   scatter: one " +
            fixed(ms(c, kScatter)) + " ms, two plans " + fixed(ms(c, kSplitScatter)) + " ms, one/two " +
            ratio_text(pair_ratios(c, kScatter, kSplitScatter)) + "\n" + "#   gather:  one " + fixed(ms(c, kGather)) +
            " ms, two plans " + fixed(ms(c, kSplitGather)) + " ms, one/two " +
            ratio_text(pair_ratios(c, kGather, kSplitGather)) + "\n");
    }
  }

  static std::string fixed(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", x);
    return buf;
  }

  void write_json(int64_t total_wrong) const {
    if (rank_ != 0 || o_.json_path.empty()) return;
    std::ofstream out(o_.json_path);
    out << "{\n  \"program\": \"" << kProgram << "\",\n  \"date\": " << json_string(utc_date())
        << ",\n  \"nranks\": " << size_
        << ",\n  \"backend\": \"mpi\",\n  \"dtype\": " << json_string(dtype_name(o_.dtype))
        << ",\n  \"head_dim\": " << o_.head_dim << ",\n  \"runs\": " << o_.runs << ",\n  \"reps\": " << o_.reps
        << ",\n  \"warmup\": " << o_.warmup << ",\n  \"mpi_transport\": "
        << json_string(std::getenv("BASP_MPI_TRANSPORT") ? std::getenv("BASP_MPI_TRANSPORT") : "auto")
        << ",\n  \"results\": [";
    for (size_t i = 0; i < cases_.size(); ++i) {
      const Case& c = *cases_[i];
      out << (i ? ",\n" : "\n") << "    {\"case\": " << json_string(c.spec.name)
          << ", \"what\": " << json_string(c.spec.what) << ", \"layout\": " << json_string(layout_name(c.spec.layout))
          << ", \"K\": " << size_ << ", \"S\": " << c.seq_len << ", \"docs\": " << c.docs
          << ", \"row_min\": " << c.row_min << ", \"row_max\": " << c.row_max
          << ", \"rank_bytes_max\": " << c.rank_bytes_max << ", \"sent_bytes_max\": " << c.sent_max
          << ", \"sent_bytes_min\": " << c.sent_min;
      if (c.spec.alst) {
        out << ", \"alst_sent_bytes_max\": " << c.alst_sent_max << ", \"alst_extra_bytes\": " << c.alst_extra_bytes;
      }
      if (!c.spec.split.empty()) {
        out << ", \"split_plans\": " << c.split_plans.size();
        const std::vector<double> rs = pair_ratios(c, kScatter, kSplitScatter);
        const std::vector<double> rg = pair_ratios(c, kGather, kSplitGather);
        out << ", \"scatter_over_split_median\": " << json_number(median(rs))
            << ", \"gather_over_split_median\": " << json_number(median(rg));
      }
      for (int op : ops_of(c)) {
        out << ", \"" << kOpNames[op] << "_ms\": " << json_number(ms(c, op)) << ", \"" << kOpNames[op]
            << "_runs_ms\": [";
        for (size_t r = 0; r < c.times[op].size(); ++r) out << (r ? ", " : "") << json_number(c.times[op][r] * 1e3);
        out << "]";
      }
      out << ", \"wrong\": " << (c.wrong < 0 ? std::string("null") : std::to_string(c.wrong))
          << ", \"path\": " << json_string(path_name(c.path)) << "}";
    }
    out << "\n  ],\n  \"out_of_bounds\": " << (o_.check ? std::to_string(total_wrong) : std::string("null")) << "\n}\n";
  }

  CostOptions o_;
  MPI_Comm world_;
  int rank_ = 0;
  int size_ = 1;
  int64_t elem_ = 0;
  std::unique_ptr<MemoryContext> memory_;
  Buffer a2a_send_, a2a_recv_;
  int64_t a2a_bytes_ = 0;
  std::vector<std::unique_ptr<Case>> cases_;
};

}  // namespace
}  // namespace basp::bench

int main(int argc, char** argv) {
  basp::bench::CostOptions o;
  basp::bench::StudyOptions options = basp::bench::cost_options(o);
  return basp::bench::mpi_study_main(basp::bench::kProgram, argc, argv, options,
                                     [&] { return basp::bench::ShapeCost(o, MPI_COMM_WORLD).run(); });
}
