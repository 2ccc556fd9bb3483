#include "transport/mpi/mpi_executor.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/trace.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {
namespace {

// Cross-memory attach pays per row: below 1 KiB rows pack + send moves bytes faster (benchmarks.md §3.1).
constexpr int64_t kCmaMinRowBytes = 1024;
// BASP_MPI_TRANSPORT values, ordered for the group's agreement (the minimum and maximum over the group).
constexpr int64_t kWantP2P = 0;
constexpr int64_t kWantAuto = 1;
constexpr int64_t kWantCma = 2;
constexpr int64_t kWantStaged = 3;

int64_t wanted_path(const std::string& mode, bool* known) {
  *known = true;
  if (mode == "auto") return kWantAuto;
  if (mode == "p2p") return kWantP2P;
  if (mode == "cma" || mode == "direct") return kWantCma;
  if (mode == "staged") return kWantStaged;
  *known = false;
  return kWantP2P;  // a bad value on one rank still takes part, so its peers do not wait for it
}

// BASP_MPI_TRANSPORT over the ranks of `scope` (one bounded all-reduce): the least and the greatest wish. A value
// that is not one of the five, on this rank or on another of `where`, is BASP_ERROR_INVALID_ARGUMENT on every rank.
struct TransportWish {
  int64_t least;
  int64_t most;
};
TransportWish agree_transport(const CollectiveScope& scope, const std::string& where, const char* step,
                              const detail::Deadline& deadline) {
  const env::Knob& knob = env::knob("BASP_MPI_TRANSPORT");
  const std::string value = env::raw(knob.name);
  const std::string mode = value.empty() ? knob.default_value : value;
  bool known = false;
  const int64_t want = wanted_path(mode, &known);
  int64_t wants[3] = {want, -want, known ? 0 : -1};
  allreduce_min(scope, wants, 3, step, deadline);
  BASP_CHECK_ARG(known, env::invalid_message(knob, value));
  BASP_CHECK_ARG(wants[2] == 0, "BASP_MPI_TRANSPORT is not auto, p2p, cma, staged or direct on another rank of ",
                 where);
  return {wants[0], -wants[1]};
}

class MpiExecutor final : public PlanExecutor {
 public:
  MpiExecutor(const plan::ExchangePlan& plan, const PlanContext& context, ControlChannel& channel,
              std::shared_ptr<SharedMemory> memory)
      : plan_(plan), control_(channel, context.plan_id), timeout_ms_(channel.group().timeout_ms) {
    context_.plan = &plan_;
    context_.control = &control_;
    context_.group = &channel.group();
    context_.memory = std::move(memory);
  }
  // A batch plan's: its control on the comm's world channel; `busy` serialises the comm's batch executes.
  MpiExecutor(const plan::ExchangePlan& plan, const BatchGroup& batch, ControlChannel& world, WorkspacePool& pool,
              std::atomic<bool>* busy)
      : plan_(plan), group_(batch.group), control_(world, batch), timeout_ms_(batch.group.timeout_ms), busy_(busy) {
    context_.plan = &plan_;
    context_.control = &control_;
    context_.group = &group_;
    context_.world = true;
    context_.pool = &pool;
  }

  const PathContext& path_context() const { return context_; }
  void set_path(std::unique_ptr<ExchangePath> path) { path_ = std::move(path); }

  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void*) override {
    run(Op::kScatter, tokens, inputs, outputs);
  }
  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void*) override {
    run(Op::kGather, tokens, inputs, outputs);
  }
  int64_t workspace_bytes() const override { return path_->workspace_bytes(); }
  void set_documents(uint64_t fingerprint) override { documents_ = fingerprint; }
  basp_path_t plan_path() const override { return path_->id(); }
  basp_path_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }
  int32_t last_control_rounds() const override { return last_rounds_.load(std::memory_order_relaxed); }

  [[noreturn]] void fail(bool scatter, int64_t tokens, const std::exception_ptr& own) override {
    if (plan_.group_size == 1) std::rethrow_exception(own);
    const Serial serial(busy_);
    const detail::Deadline deadline(timeout_ms_);
    control_.begin(scatter ? Op::kScatter : Op::kGather, tokens, documents_);
    try {
      // The peers report BASP_ERROR_MISMATCH naming this rank; the exchange did not happen on any rank.
      control_.arrive_failed(detail::status_of(own), deadline,
                             scatter ? "the arrival of the group's ranks at basp_scatter (this rank's checks failed)"
                                     : "the arrival of the group's ranks at basp_gather (this rank's checks failed)");
    } catch (...) {
      last_rounds_.store(control_.rounds(), std::memory_order_relaxed);
      control_.end();
      throw;
    }
    control_.rollback();
    last_rounds_.store(control_.rounds(), std::memory_order_relaxed);
    control_.end();
    std::rethrow_exception(own);
  }

 private:
  // Executes of one comm's batch plans run one at a time: they share one tag and one workspace.
  class Serial {
   public:
    explicit Serial(std::atomic<bool>* busy) : busy_(busy) {
      bool expected = false;
      BASP_CHECK_ARG(busy_ == nullptr || busy_->compare_exchange_strong(expected, true, std::memory_order_acq_rel),
                     "another batch plan of this comm is executing on another thread: the batch plans of one comm "
                     "execute one at a time");
    }
    ~Serial() {
      if (busy_ != nullptr) busy_->store(false, std::memory_order_release);
    }
    Serial(const Serial&) = delete;
    Serial& operator=(const Serial&) = delete;

   private:
    std::atomic<bool>* busy_;
  };

  void run(Op op, int64_t tokens, const void* const* inputs, void* const* outputs) {
    const detail::TraceRange range(op == Op::kScatter ? "basp:scatter" : "basp:gather");
    const Serial serial(busy_);
    const detail::Deadline deadline(timeout_ms_);
    for (int32_t t = 0; t < plan_.num_tensors(); ++t) geom_[static_cast<size_t>(t)] = plan_.at(t, tokens);
    const Exchange x{op, tokens, geom_.data(), inputs, outputs, deadline};
    control_.begin(op, tokens, documents_);
    try {
      last_path_.store(path_->run(x), std::memory_order_relaxed);
    } catch (const detail::Error& e) {
      // A mismatched exchange did not happen, on any rank: its call number is taken back everywhere.
      if (e.status() == BASP_ERROR_MISMATCH) control_.rollback();
      last_rounds_.store(control_.rounds(), std::memory_order_relaxed);
      control_.end();
      throw;
    } catch (...) {
      control_.end();
      throw;
    }
    last_rounds_.store(control_.rounds(), std::memory_order_relaxed);
    control_.end();
  }

  plan::ExchangePlan plan_;
  GroupSpec group_;                                      // a batch plan's group (positions -> world ranks)
  std::array<layout::Geometry, BASP_MAX_TENSORS> geom_;  // the current call's
  PlanControl control_;
  PathContext context_;
  int64_t timeout_ms_;
  std::unique_ptr<ExchangePath> path_;
  std::atomic<basp_path_t> last_path_{BASP_PATH_NONE};  // read by basp_plan_query from any thread
  std::atomic<int32_t> last_rounds_{0};
  uint64_t documents_ = 0;             // set between executes (runtime::Plan), never during one
  std::atomic<bool>* busy_ = nullptr;  // batch plans: the comm's "a batch plan executes" flag
};

// Whether the plan's head-sharded rows are long enough for cross-memory attach to beat pack + send.
bool rows_suit_cma(const plan::ExchangePlan& plan) {
  int64_t min_row = INT64_MAX;
  for (const auto& g : plan.tensors) {
    for (int32_t j = 0; j < g.k; ++j) {
      if (g.heads_of(j) > 0) min_row = std::min(min_row, g.head_row_bytes(j));
    }
  }
  return min_row >= kCmaMinRowBytes;
}

// The value rank `me` of a probe holds where its peers read it.
uint64_t cma_probe_value(int32_t me) { return 0xBA5Bull << 32 | static_cast<uint32_t>(me); }

// One rank's process and the address of its probe value, as its peers read it.
struct CmaEndpoint {
  int64_t pid;
  uint64_t address;
};

// Collective over `scope` (`size` ranks, this one `me`): every rank's endpoint. The probe value stays valid while
// the peers read it: this thread is inside the next collective of the probe until they are done.
std::vector<CmaEndpoint> exchange_cma_endpoints(const CollectiveScope& scope, int32_t me, int32_t size,
                                                const char* step, const detail::Deadline& deadline) {
  static thread_local uint64_t probe_value = 0;
  probe_value = cma_probe_value(me);
  const CmaEndpoint mine{static_cast<int64_t>(getpid()), reinterpret_cast<uint64_t>(&probe_value)};
  std::vector<CmaEndpoint> all(static_cast<size_t>(size));
  allgather_bytes(scope, &mine, sizeof(CmaEndpoint), all.data(), step, deadline);
  return all;
}

// Collective: true when every rank of the group can read every other one's memory with cross-memory attach; the
// process of each position in `pids`.
bool probe_cma(const plan::ExchangePlan& plan, const CollectiveScope& group, bool one_node, bool forced,
               const detail::Deadline& deadline, std::vector<pid_t>& pids) {
  if (!forced && !rows_suit_cma(plan)) return false;
  // Can every rank read every other rank's memory? Probe a known value through each peer.
  const int k = plan.group_size;
  const int me = plan.position;
  const std::vector<CmaEndpoint> all =
      exchange_cma_endpoints(group, me, k, "the exchange of process ids at basp_plan_create", deadline);
  int64_t ok = one_node ? 1 : 0;
  for (int j = 0; j < k && ok; ++j) {
    if (j != me) {
      ok = cma_probe(static_cast<pid_t>(all[j].pid), all[j].address, cma_probe_value(j));
    }
  }
  allreduce_min(group, &ok, 1, "the cross-memory-attach probe at basp_plan_create", deadline);
  BASP_CHECK(ok || !forced, BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=cma was requested but ",
             !one_node ? "the group spans several nodes"
                       : "cross-memory attach (process_vm_readv) is not permitted between the group's ranks");
  for (const CmaEndpoint& e : all) pids.push_back(static_cast<pid_t>(e.pid));
  return ok == 1;
}

std::unique_ptr<ExchangePath> choose_path(const plan::ExchangePlan& plan, const PathContext& context,
                                          const CollectiveScope& group) {
  if (plan.group_size == 1) return make_local_path(context);
  const detail::Deadline deadline(context.group->timeout_ms);
  // Every rank must take the same path, whatever its environment says.
  const TransportWish wish =
      agree_transport(group, context.group->where, "the choice of the MPI path at basp_plan_create", deadline);
  const int64_t min_want = wish.least;
  const int64_t max_want = wish.most;
  if (min_want == kWantP2P) return make_p2p_path(context, group.comm);  // p2p anywhere wins: every rank can do it
  BASP_CHECK_ARG(min_want == max_want || min_want == kWantAuto,
                 "BASP_MPI_TRANSPORT is cma (or direct) on some ranks of ", context.group->where,
                 " and staged on others: set the same value on every rank");
  const int64_t forced = max_want;  // kWantAuto when nobody forced a path
  // Same node? (Blocking, but every rank is inside this call since the bounded round above.)
  MPI_Comm node = MPI_COMM_NULL;
  BASP_MPI_CHECK(MPI_Comm_split_type(group.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  OwnedComm node_owned(node);
  int node_size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(node, &node_size));
  const bool one_node = node_size == plan.group_size;  // the same answer on every rank of the group
  if (forced != kWantCma) {
    if (one_node) {
      if (auto staged = make_staged_path(context, group, deadline)) return staged;
    }
    BASP_CHECK(forced != kWantStaged, BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=staged was requested but ",
               one_node ? "the group's ranks cannot map each other's memory (memfd through /proc)"
                        : "the group spans several nodes");
  }
  std::vector<pid_t> pids;
  if (probe_cma(plan, group, one_node, forced == kWantCma, deadline, pids)) return make_cma_path(context, pids);
  return make_p2p_path(context, group.comm);
}

}  // namespace

bool BatchLocality::cma_group(const std::vector<int32_t>& members) const {
  return !p2p_only && on_one_working_node(cma_node, members);
}

BatchLocality find_batch_locality(const CollectiveScope& world, int32_t world_rank, const std::vector<uint64_t>& nodes,
                                  const detail::Deadline& deadline) {
  const TransportWish wish =
      agree_transport(world, world.where, "the choice of the batch plans' MPI paths at comm creation", deadline);
  BASP_CHECK_ARG(wish.least == wish.most, "BASP_MPI_TRANSPORT is not the same on every rank of ", world.where,
                 " (a comm for batch plans needs one value: its groups choose their paths without talking)");
  const int64_t want = wish.least;
  BatchLocality out;
  out.p2p_only = want == kWantP2P;
  out.forced_cma = want == kWantCma;
  out.forced_staged = want == kWantStaged;
  const auto n = world.members.size();
  if (out.p2p_only || nodes.size() != n) return out;  // the same on every rank: no probe round
  // Every rank's process, and whether it can read each rank of its node (a known value through each peer).
  const std::vector<CmaEndpoint> all = exchange_cma_endpoints(world, world_rank, static_cast<int32_t>(n),
                                                              "the exchange of process ids at comm creation", deadline);
  int64_t ok = 1;
  for (size_t r = 0; r < n && ok; ++r) {
    if (static_cast<int32_t>(r) != world_rank && nodes[r] == nodes[static_cast<size_t>(world_rank)]) {
      ok = cma_probe(static_cast<pid_t>(all[r].pid), all[r].address, cma_probe_value(static_cast<int32_t>(r)));
    }
  }
  std::vector<int64_t> oks(n);
  allgather_bytes(world, &ok, sizeof ok, oks.data(), "the cross-memory-attach probe at comm creation", deadline);
  out.cma_node = working_nodes(nodes, oks);  // a node where any rank failed its probe is none
  for (size_t r = 0; r < n; ++r) {
    BASP_CHECK(!out.forced_cma || out.cma_node[r] >= 0, BASP_ERROR_UNSUPPORTED,
               "BASP_MPI_TRANSPORT=cma was requested but cross-memory attach (process_vm_readv) is not permitted "
               "between the ranks of world rank ",
               r, "'s node");
  }
  for (size_t r = 0; r < n; ++r) out.pids.push_back(static_cast<pid_t>(all[r].pid));
  return out;
}

std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const BatchGroup& batch,
                                                  const BatchLocality& locality, NodeStaging& staging,
                                                  ControlChannel& world, MPI_Comm data, WorkspacePool& pool,
                                                  std::atomic<bool>& busy) {
  auto executor = std::make_unique<MpiExecutor>(plan, batch, world, pool, &busy);
  // Chosen locally: every rank of the group derives the same group, plan and locality from the same membership.
  const std::vector<int32_t>& members = batch.group.members;
  if (plan.group_size == 1) {
    executor->set_path(make_local_path(executor->path_context()));
  } else if (!locality.p2p_only && !locality.forced_cma && staging.one_node(members)) {
    executor->set_path(make_batch_staged_path(executor->path_context(), staging));
  } else if (locality.cma_group(members) && (locality.forced_cma || rows_suit_cma(plan))) {
    std::vector<pid_t> pids;
    for (int32_t r : members) pids.push_back(locality.pids[static_cast<size_t>(r)]);
    executor->set_path(make_cma_path(executor->path_context(), std::move(pids)));
  } else {
    executor->set_path(make_p2p_path(executor->path_context(), data));
  }
  return executor;
}

std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context,
                                            const CollectiveScope& group, ControlChannel& channel,
                                            std::shared_ptr<SharedMemory> memory) {
  auto executor = std::make_unique<MpiExecutor>(plan, context, channel, std::move(memory));
  executor->set_path(choose_path(plan, executor->path_context(), group));
  return executor;
}

}  // namespace basp::transport::mpi
