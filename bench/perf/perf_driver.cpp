// The shared driver of the perf binaries (nccl-tests' common.cu): parse, then for each micro-batch B and size:
// create the plans of each mode through the public C ABI, check the plans' own description against the
// benchmark's formulas, grow the buffers to the shapes (outside the timed region), warm up, time the iterations,
// check one more iteration bit-exactly, print a row. Everything an operation changes is in its
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

// The buffers of one exchange: per tensor, the input and output, grown to the largest shape measured so far.
struct ExchangeBuffers {
  std::vector<Buffer> inputs;
  std::vector<Buffer> outputs;
  std::vector<const void*> input_ptrs;
  std::vector<void*> output_ptrs;
};

// One mode at one micro-batch size: its comm and, for THD, how the documents went to its groups.
struct ModeState {
  basp::Comm comm;
  basp::RankInfo info;                                                 // this rank, from basp_comm_query
  basp_doc_assignment_t assignment = BASP_DOC_ASSIGNMENT_INITIALIZER;  // THD: this rank
  int64_t max_rank_tokens = 0;                                         // THD: over all ranks
  std::vector<int64_t> streams;                                        // THD: T of each group
  std::vector<int64_t> cu_seqlens;  // THD: this rank's group's document boundaries (basp_plan_set_documents)
};

// "192,192,128": a list as typed on the command line.
std::string int_list(const std::vector<int64_t>& v, const char* separator = ",") {
  std::string out;
  for (int64_t x : v) out += (out.empty() ? "" : separator) + std::to_string(x);
  return out;
}

// "1000" or "998..1003": the range of a list, for the THD comment line.
std::string range_text(const std::vector<int64_t>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo == *hi ? std::to_string(*lo) : std::to_string(*lo) + ".." + std::to_string(*hi);
}

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
    rows_ = thd() ? thd_rows(o_.micro_batches, o_.doc_lengths)
                  : shape_rows(size_sweep(o_), o_.micro_batches, size_, token_bytes_, elem_, o_.mode);
    // A gather that must sum a KV head held by several ranks needs a type the library can add.
    for (int64_t b : o_.micro_batches) {
      for (int64_t g : mode_groups(o_.mode, size_, b)) {
        const int64_t k = size_ / g;
        for (const Exchange& e : exchanges_) {
          for (const Tensor& t : e.tensors) {
            if (e.direction == Direction::kGather && !summable(o_.dtype) &&
                max_holders(k, t.heads, t.query_heads) > 1) {
              throw ArgError("-d (" + std::string(dtype_name(o_.dtype)) + "): the gather of " + t.name +
                             " sums key/value heads that several ranks hold (Hkv " + std::to_string(t.heads) +
                             " for Hq " + std::to_string(t.query_heads) + " at K = " + std::to_string(k) +
                             ", B = " + std::to_string(b) + "), which needs fp16, bf16, fp32 or fp64");
            }
          }
        }
      }
    }
  }

  int run() {
    if (!all_succeed(world_, op_.program, [&] { setup_memory(); })) return 3;
    print_preamble();
    for (int64_t b : o_.micro_batches) {
      std::vector<ModeState> states(modes_.size());
      const bool ok = all_succeed(world_, op_.program, [&] {
        for (size_t m = 0; m < modes_.size(); ++m) {
          states[m].comm = make_comm(b, modes_[m]);
          states[m].info = states[m].comm.query(0);
          if (thd()) assign_documents(states[m]);
        }
      });
      if (!ok) return 3;
      std::string line = "# B = " + std::to_string(b) + ":";
      for (size_t m = 0; m < modes_.size(); ++m) {
        line += (m ? " | " : " ") + modes_[m].name + " G=" + std::to_string(states[m].info.num_groups) +
                " K=" + std::to_string(states[m].info.group_size);
        if (thd()) line += " T=" + range_text(states[m].streams);
      }
      print(line + "\n");
      for (RowShape r : rows_) {
        if (r.micro_batch != b) continue;
        if (thd()) {
          int64_t tokens = 0;
          for (const ModeState& st : states) tokens = std::max(tokens, st.max_rank_tokens);
          r.bytes = tokens * token_bytes_;
          r.count = r.bytes / elem_;
        }
        TableRow row;
        row.bytes = r.bytes;
        row.count = r.count;
        row.type = dtype_name(o_.dtype);
        row.micro_batch = b;
        row.seq_len = r.seq_len;
        for (size_t m = 0; m < modes_.size(); ++m) {
          ModeResult res;
          JsonRecord j;
          if (!measure(states[m], r, res, j)) return 3;
          row.modes.push_back(res);
          record(modes_[m].name, r, res, j);
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
  bool thd() const { return o_.layout == BASP_LAYOUT_THD; }

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
    buffers_.resize(exchanges_.size());
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      const size_t n = exchanges_[e].tensors.size();
      buffers_[e].inputs.resize(n);
      buffers_[e].outputs.resize(n);
      buffers_[e].input_ptrs.assign(n, nullptr);
      buffers_[e].output_ptrs.assign(n, nullptr);
    }
  }

  // Grows a buffer to `bytes` (outside any timed region; the old one is released first, so memory never holds
  // both).
  void ensure(Buffer& buf, size_t bytes) {
    if (buf.get() && buf.bytes() >= bytes) return;
    buf = Buffer();
    buf = Buffer(*memory_, bytes);
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

  // THD: the documents to the mode's groups (not collective: every rank computes every rank's share).
  void assign_documents(ModeState& st) const {
    const auto n = static_cast<int32_t>(o_.doc_lengths.size());
    std::vector<int64_t> streams(static_cast<size_t>(st.info.num_groups), -1);
    st.max_rank_tokens = 0;
    for (int32_t r = 0; r < size_; ++r) {
      basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
      basp::check(basp_comm_assign_documents(st.comm.get(), o_.doc_lengths.data(), n, 0, r, &a, nullptr, nullptr, 0));
      streams[static_cast<size_t>(a.group_index)] = a.stream_tokens;
      st.max_rank_tokens = std::max(st.max_rank_tokens, a.token_end - a.token_begin);
      if (r == rank_) {
        st.assignment = a;
        st.cu_seqlens.assign(static_cast<size_t>(n) + 1, 0);
        basp::check(basp_comm_assign_documents(st.comm.get(), o_.doc_lengths.data(), n, 0, r, &a, nullptr,
                                               st.cu_seqlens.data(), n));
        st.cu_seqlens.resize(static_cast<size_t>(a.num_docs) + 1);
      }
      // The library's token range must be tensor_split's of the stream.
      if (a.token_begin != split_begin(a.stream_tokens, a.group_size, a.group_position) ||
          a.token_end != split_begin(a.stream_tokens, a.group_size, a.group_position + 1)) {
        throw std::runtime_error("basp_comm_assign_documents gives rank " + std::to_string(r) + " tokens [" +
                                 std::to_string(a.token_begin) + ", " + std::to_string(a.token_end) +
                                 ") of a stream of " + std::to_string(a.stream_tokens) + ", not tensor_split's range");
      }
    }
    st.streams = streams;
  }

  void print_preamble() {
    const std::string ranks = rank_lines(world_);
    std::string p;
    p += "# " + std::string(op_.program) + ": " + op_.description + "\n";
    p += "# nranks " + std::to_string(size_) + " backend " + backend_name(o_.backend) + " placement " +
         placement_name(o_.placement) + " layout " + layout_name(o_.layout) +
         (o_.model.empty() ? "" : " model " + o_.model) + " heads " + std::to_string(o_.heads) + " kv-heads " +
         std::to_string(o_.kv_heads) +
         (o_.head_dims.empty() ? " head-dim " + std::to_string(o_.head_dim)
                               : " head-dims " + int_list(o_.head_dims) + " (Q,K,V; O and dO as V)") +
         " type " + dtype_name(o_.dtype) + " mode " + mode_name(o_.mode) + " pass " + pass_name(o_.pass) + "\n";
    p += "# exchanges per iteration: " + describe_exchanges(exchanges_) + "\n";
    if (thd()) {
      int64_t total = 0;
      for (int64_t l : o_.doc_lengths) total += l;
      p += "# THD: " + std::to_string(o_.doc_lengths.size()) + " documents of " + range_text(o_.doc_lengths) +
           " tokens, " + std::to_string(total) + " in all (" + o_.doc_source +
           "), assigned to each mode's groups by basp_comm_assign_documents; S = all tokens, T = each group's "
           "stream\n";
    } else {
      const std::string step =
          o_.step_factor > 1 ? std::to_string(o_.step_factor) + "(factor)" : std::to_string(o_.step_bytes) + "(bytes)";
      p +=
          "# minBytes " + std::to_string(o_.min_bytes) + " maxBytes " + std::to_string(o_.max_bytes) + " step: " + step;
    }
    p += std::string(thd() ? "#" : "") + " warmup iters: " + std::to_string(o_.warmup_iters) +
         " iters: " + std::to_string(o_.iters) + " validation: " + std::to_string(o_.check) +
         " blocking: " + std::to_string(o_.blocking) + " graph: " + std::to_string(o_.graph_launches) +
         " average: " + std::to_string(o_.average) + "\n";
    p +=
        "# size = bytes of " + size_meaning(exchanges_) +
        " on the rank holding the most (max over ranks and modes; algbw = the mode's own largest rank's bytes / time)" +
        (thd() ? "" : ", S = floor(N * requested size / (B * bytes per token)), not rounded") +
        "; busbw = algbw * (K-1)/K\n";
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

  void iteration(std::vector<basp::Plan>& plans, int64_t tokens) {
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      ExchangeBuffers& buf = buffers_[e];
      const bool scatter = exchanges_[e].direction == Direction::kScatter;
      if (thd()) {
        basp::check((scatter ? basp_scatter_tokens : basp_gather_tokens)(plans[e].get(), tokens, buf.input_ptrs.data(),
                                                                         buf.output_ptrs.data(), memory_->stream()));
      } else if (scatter) {
        plans[e].scatter(buf.input_ptrs.data(), buf.output_ptrs.data(), memory_->stream());
      } else {
        plans[e].gather(buf.input_ptrs.data(), buf.output_ptrs.data(), memory_->stream());
      }
    }
  }

  // Per-rank seconds of one iteration.
  double time_iterations(std::vector<basp::Plan>& plans, int64_t tokens) {
    for (int32_t i = 0; i < o_.warmup_iters; ++i) iteration(plans, tokens);
    memory_->synchronize();
    if (o_.graph_launches > 0) {
      memory_->capture_graph([&] {
        for (int32_t i = 0; i < o_.iters; ++i) iteration(plans, tokens);
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
      iteration(plans, tokens);
      if (o_.blocking) memory_->synchronize();
    }
    memory_->synchronize();
    return (MPI_Wtime() - t0) / o_.iters;
  }

  std::vector<std::vector<TensorCheck>> checks(const RankPlace& place) const {
    std::vector<std::vector<TensorCheck>> out;
    for (const Exchange& ex : exchanges_) {
      out.emplace_back();
      for (const Tensor& t : ex.tensors)
        out.back().push_back(tensor_check(place, ex.direction, o_.dtype, o_.head_dim, t));
    }
    return out;
  }

  // Fills the inputs, poisons the outputs, runs one iteration and counts wrong output elements on this rank.
  int64_t check_iteration(std::vector<basp::Plan>& plans, const RankPlace& place) {
    const std::vector<std::vector<TensorCheck>> all = checks(place);
    std::vector<unsigned char> staging;
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      for (size_t t = 0; t < all[e].size(); ++t) {
        const TensorCheck& c = all[e][t];
        const int64_t id = static_cast<int64_t>(e) * BASP_MAX_TENSORS + static_cast<int64_t>(t);
        void* in_buf = buffers_[e].inputs[t].get();
        if (memory_->host_accessible()) {
          fill_input(c, kSeed, id, in_buf);
        } else {
          staging.resize(static_cast<size_t>(c.input.bytes()));
          fill_input(c, kSeed, id, staging.data());
          memory_->copy_to_buffer(in_buf, staging.data(), staging.size());
        }
        memory_->fill(buffers_[e].outputs[t].get(), kCheckPoison, static_cast<size_t>(c.output.bytes()));
      }
    }
    iteration(plans, place.seq_len);
    memory_->synchronize();
    int64_t wrong = 0;
    for (size_t e = 0; e < exchanges_.size(); ++e) {
      for (size_t t = 0; t < all[e].size(); ++t) {
        const TensorCheck& c = all[e][t];
        const int64_t id = static_cast<int64_t>(e) * BASP_MAX_TENSORS + static_cast<int64_t>(t);
        const auto bytes = static_cast<size_t>(c.output.bytes());
        unsigned char* host = nullptr;
        if (memory_->host_accessible()) {
          host = static_cast<unsigned char*>(buffers_[e].outputs[t].get());
        } else {
          staging.resize(bytes);
          memory_->copy_to_host(staging.data(), buffers_[e].outputs[t].get(), bytes);
          host = staging.data();
        }
        if (e + 1 == exchanges_.size() && t + 1 == all[e].size() && o_.corrupt > 0) {
          // Test hook: damage the result the way a wrong offset would, so a test can see the check fail. The last
          // tensor of the iteration: V of a forward scatter, dV of a backward gather (a sum when KV heads are
          // replicated).
          for (size_t i = 0; i < std::min(bytes, static_cast<size_t>(o_.corrupt)); ++i) host[i] ^= 0xFF;
        }
        wrong += count_wrong_output(c, kSeed, id, host);
      }
    }
    return wrong;
  }

  // The plan's own description must agree with the benchmark's formulas (tensor_split of tokens and heads, the
  // KV heads that follow the query split, the routing minimum). `place` is at the plan's token count (THD: its
  // capacity, as basp_plan_info_t reports it).
  void check_plan_info(const basp::PlanInfo& pi, const Exchange& e, const RankPlace& place) const {
    auto fail = [&](const std::string& what, int64_t got, int64_t want) {
      throw std::runtime_error("plan query disagrees with the benchmark's shape: " + what + " is " +
                               std::to_string(got) + ", expected " + std::to_string(want) +
                               " (K = " + std::to_string(place.group_size) + ", position " +
                               std::to_string(place.position) + ", S = " + std::to_string(place.seq_len) + ")");
    };
    if (pi.group_size != place.group_size) fail("group_size", pi.group_size, place.group_size);
    const int64_t tb = split_begin(place.seq_len, place.group_size, place.position);
    const int64_t te = split_begin(place.seq_len, place.group_size, place.position + 1);
    if (pi.token_begin != tb) fail("token_begin", pi.token_begin, tb);
    if (pi.token_end != te) fail("token_end", pi.token_end, te);
    bool replicated = false;
    for (size_t t = 0; t < e.tensors.size(); ++t) {
      const Tensor& ten = e.tensors[t];
      const std::string name = "tensor " + std::to_string(t) + " (" + ten.name + ") ";
      const int64_t dim = tensor_head_dim(ten, o_.head_dim);
      const Shard seq = seq_shard(place, elem_, dim, ten.heads);
      const Shard head = head_shard(place, elem_, dim, ten.heads, ten.query_heads);
      if (pi.seq_sharded_elems[t] != seq.elements())
        fail(name + "seq_sharded_elems", pi.seq_sharded_elems[t], seq.elements());
      if (pi.head_sharded_elems[t] != head.elements()) {
        fail(name + "head_sharded_elems", pi.head_sharded_elems[t], head.elements());
      }
      const int64_t held = pi.head_end[t] - pi.head_begin[t];
      if (held != head.heads) fail(name + "heads held", held, head.heads);
      if (held > 0 && pi.head_begin[t] != head.head_begin) fail(name + "head_begin", pi.head_begin[t], head.head_begin);
      replicated = replicated || max_holders(place.group_size, ten.heads, ten.query_heads) > 1;
    }
    if ((pi.replicated != 0) != replicated) fail("replicated", pi.replicated, replicated);
    const int64_t sent = routing_minimum(e, place);
    if (pi.bytes_sent_per_exchange != sent) fail("bytes_sent_per_exchange", pi.bytes_sent_per_exchange, sent);
  }

  // Bytes this rank sends to other ranks in one exchange: every peer gets this rank's rows of the heads it holds.
  int64_t routing_minimum(const Exchange& e, const RankPlace& place) const {
    const std::vector<int64_t> to = scatter_bytes_to(place, elem_, o_.head_dim, e.tensors);
    int64_t sent = 0;
    for (size_t j = 0; j < to.size(); ++j) sent += static_cast<int64_t>(j) == place.position ? 0 : to[j];
    return sent;
  }

  // Plans (collective), timing and check of one mode at one row. False after an error was printed.
  bool measure(ModeState& st, const RowShape& r, ModeResult& res, JsonRecord& rec) {
    std::vector<basp::Plan> plans;
    RankPlace place;  // at this execute's tokens
    const bool created = all_succeed(world_, op_.program, [&] {
      RankPlace at_plan;  // at the plan's tokens (THD: the capacity)
      int64_t capacity = 0;
      if (thd()) {
        place = rank_place(st.assignment);
        for (int64_t t : st.streams) capacity = std::max(capacity, t);
        capacity = std::max<int64_t>(capacity, 1);
        at_plan = place;
        at_plan.seq_len = capacity;
      } else {
        place = rank_place(st.comm.query(r.seq_len), o_.layout, r.seq_len);
        at_plan = place;
      }
      for (size_t x = 0; x < exchanges_.size(); ++x) {
        const Exchange& e = exchanges_[x];
        basp::PlanDesc desc;
        desc.layout = o_.layout;
        desc.dtype = o_.dtype;
        desc.seq_len = thd() ? -1 : r.seq_len;
        desc.token_capacity = thd() ? capacity : 0;
        desc.head_dim = o_.head_dim;
        desc.num_tensors = static_cast<int32_t>(e.tensors.size());
        for (size_t t = 0; t < e.tensors.size(); ++t) {
          desc.num_heads[t] = e.tensors[t].heads;
          desc.query_heads[t] = e.tensors[t].query_heads;
          desc.head_dims[t] = e.tensors[t].head_dim;
        }
        try {
          plans.emplace_back(st.comm, desc);
        } catch (const basp::Error& err) {
          throw std::runtime_error("creating the plan (B = " + std::to_string(r.micro_batch) +
                                   ", S = " + std::to_string(r.seq_len) + ", K = " + std::to_string(place.group_size) +
                                   ", " + describe_exchanges({e}) + "): " + err.what());
        }
        check_plan_info(plans.back().info(), e, at_plan);
        // THD: the group's document boundaries, as a training step passes them (checked across the group).
        if (thd()) {
          basp::check(basp_plan_set_documents(plans.back().get(), st.cu_seqlens.data(),
                                              static_cast<int32_t>(st.cu_seqlens.size()) - 1));
        }
        // Buffers for this execute's shapes.
        for (size_t t = 0; t < e.tensors.size(); ++t) {
          const TensorCheck c = tensor_check(place, e.direction, o_.dtype, o_.head_dim, e.tensors[t]);
          ensure(buffers_[x].inputs[t], static_cast<size_t>(c.input.bytes()));
          ensure(buffers_[x].outputs[t], static_cast<size_t>(c.output.bytes()));
          buffers_[x].input_ptrs[t] = buffers_[x].inputs[t].get();
          buffers_[x].output_ptrs[t] = buffers_[x].outputs[t].get();
        }
      }
    });
    if (!created) return false;
    res.num_groups = st.info.num_groups;
    res.group_size = st.info.group_size;
    // Per-rank byte counts of this mode, for the JSON: the largest and smallest rank.
    int64_t counts[4] = {0, 0, 0, 0};  // rank bytes, -rank bytes, sent, -sent
    for (const Exchange& e : exchanges_) {
      for (const Tensor& t : e.tensors) {
        counts[0] += seq_shard(place, elem_, tensor_head_dim(t, o_.head_dim), t.heads).bytes();
      }
      counts[2] += routing_minimum(e, place);
    }
    counts[1] = -counts[0];
    counts[3] = -counts[2];
    MPI_Allreduce(MPI_IN_PLACE, counts, 4, MPI_INT64_T, MPI_MAX, world_);
    rec.rank_bytes_max = counts[0];
    rec.rank_bytes_min = -counts[1];
    rec.sent_bytes_max = counts[2];
    rec.sent_bytes_min = -counts[3];
    // Failures from here on happen inside collectives: abort rather than leave other ranks waiting.
    try {
      const double seconds = combine_time(world_, time_iterations(plans, place.seq_len), o_.average);
      res.time_us = seconds * 1e6;
      // The mode's own largest rank (the slowest one): the size column's bytes unless the other mode holds more.
      res.algbw = algbw_gbs(rec.rank_bytes_max, seconds);
      res.busbw = busbw_gbs(res.algbw, st.info.group_size);
      if (o_.check) {
        int64_t wrong = check_iteration(plans, place);
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

  void record(const std::string& mode, const RowShape& r, const ModeResult& res, JsonRecord j) {
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
    std::string docs;
    for (int64_t l : o_.doc_lengths) docs += (docs.empty() ? "" : ", ") + std::to_string(l);
    std::vector<std::pair<std::string, std::string>> header = {
        {"program", json_string(op_.program)},
        {"operation", json_string(op_.description)},
        {"exchanges", json_string(describe_exchanges(exchanges_))},
        {"size_meaning", json_string(size_meaning(exchanges_))},
        {"size_is", json_string("the largest rank's bytes, over ranks and modes")},
        {"date", json_string(utc_date())},
        {"nranks", std::to_string(size_)},
        {"backend", json_string(backend_name(o_.backend))},
        {"placement", json_string(placement_name(o_.placement))},
        {"layout", json_string(layout_name(o_.layout))},
        {"dtype", json_string(dtype_name(o_.dtype))},
        {"model", o_.model.empty() ? std::string("null") : json_string(o_.model)},
        {"pass", json_string(pass_name(o_.pass))},
        {"heads", std::to_string(o_.heads)},
        {"kv_heads", std::to_string(o_.kv_heads)},
        {"head_dim", std::to_string(o_.head_dim)},
        {"head_dims", o_.head_dims.empty() ? std::string("null") : "[" + int_list(o_.head_dims, ", ") + "]"},
        {"micro_batches", "[" + batches + "]"},
        {"iters", std::to_string(o_.iters)},
        {"warmup_iters", std::to_string(o_.warmup_iters)},
        {"average", std::to_string(o_.average)},
        {"blocking", std::to_string(o_.blocking)},
        {"graph_launches", std::to_string(o_.graph_launches)},
        {"mpi_transport", json_string(std::getenv("BASP_MPI_TRANSPORT") ? std::getenv("BASP_MPI_TRANSPORT") : "auto")},
    };
    if (thd()) {
      header.emplace_back("doc_source", json_string(o_.doc_source));
      header.emplace_back("doc_lengths", "[" + docs + "]");
    }
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
