#include "transport/mpi/path_choice.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {
namespace {

// Cross-memory attach pays per row: below 1 KiB rows pack + send moves bytes faster (benchmarks.md §3.1).
constexpr int64_t kCmaMinRowBytes = 1024;
// BASP_MPI_TRANSPORT values (Want), ordered for the group's agreement (the minimum and maximum over the group).
constexpr int64_t kWantP2P = static_cast<int64_t>(Want::kP2P);
constexpr int64_t kWantAuto = static_cast<int64_t>(Want::kAuto);
constexpr int64_t kWantCma = static_cast<int64_t>(Want::kCma);
constexpr int64_t kWantStaged = static_cast<int64_t>(Want::kStaged);

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

// The table's entries. make() may return nullptr: the path cannot serve after all (the next entry is tried).
struct PathEntry {
  bool (*usable)(const PathFacts& facts);
  std::unique_ptr<ExchangePath> (*make)(const PathFacts& facts, const PathContext& context, PathSource& source);
};

std::unique_ptr<ExchangePath> make_p2p(const PathFacts&, const PathContext& context, PathSource& source) {
  return make_p2p_path(context, source.data());
}

std::unique_ptr<ExchangePath> make_cma(const PathFacts& facts, const PathContext& context, PathSource& source) {
  std::vector<pid_t> pids;
  if (!source.cma(facts, pids)) return nullptr;
  return make_cma_path(context, std::move(pids));
}

std::unique_ptr<ExchangePath> refuse_staged(const PathFacts& facts, const PathContext&, PathSource&) {
  detail::fail(BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=staged was requested but ",
               facts.one_node ? "the group's ranks cannot map each other's memory (memfd through /proc)"
                              : "the group spans several nodes");
}

constexpr PathEntry kPaths[] = {
    // local: K = 1, a copy
    {[](const PathFacts& f) { return f.group_size == 1; },
     [](const PathFacts&, const PathContext& c, PathSource&) { return make_local_path(c); }},
    // p2p, forced: every rank can do it
    {[](const PathFacts& f) { return f.want == Want::kP2P; }, make_p2p},
    // staged: one node, any row size
    {[](const PathFacts& f) { return f.want != Want::kCma && f.one_node; },
     [](const PathFacts&, const PathContext& c, PathSource& s) { return s.staged(c); }},
    // staged was forced and cannot serve this plan's group
    {[](const PathFacts& f) { return f.strict && f.want == Want::kStaged; }, refuse_staged},
    // cma: one node where cross-memory attach works, long rows (any when forced)
    {[](const PathFacts& f) { return f.want == Want::kCma || f.rows_suit_cma; }, make_cma},
    // p2p: anywhere
    {[](const PathFacts&) { return true; }, make_p2p},
};

class PlanSource final : public PathSource {
 public:
  PlanSource(const plan::ExchangePlan& plan, const CollectiveScope& group, const detail::Deadline& deadline)
      : plan_(plan), group_(group), deadline_(deadline) {}
  std::unique_ptr<ExchangePath> staged(const PathContext& context) override {
    return make_staged_path(context, group_, deadline_);
  }
  bool cma(const PathFacts& facts, std::vector<pid_t>& pids) override {
    return probe_cma(plan_, group_, facts.one_node, facts.want == Want::kCma, deadline_, pids);
  }
  DataComm data() override { return DataComm::duplicate(group_.comm); }

 private:
  const plan::ExchangePlan& plan_;
  const CollectiveScope& group_;
  detail::Deadline deadline_;
};

class BatchSource final : public PathSource {
 public:
  BatchSource(const BatchLocality& locality, NodeStaging& staging, const std::vector<int32_t>& members, MPI_Comm data)
      : locality_(locality), staging_(staging), members_(members), data_(data) {}
  std::unique_ptr<ExchangePath> staged(const PathContext& context) override {
    return make_batch_staged_path(context, staging_);
  }
  bool cma(const PathFacts&, std::vector<pid_t>& pids) override {
    if (!locality_.cma_group(members_)) return false;
    for (int32_t r : members_) pids.push_back(locality_.pids[static_cast<size_t>(r)]);
    return true;
  }
  DataComm data() override { return DataComm::shared(data_); }

 private:
  const BatchLocality& locality_;
  NodeStaging& staging_;
  const std::vector<int32_t>& members_;
  MPI_Comm data_;
};

}  // namespace

std::unique_ptr<ExchangePath> choose_path(const PathFacts& facts, const PathContext& context, PathSource& source) {
  for (const PathEntry& entry : kPaths) {
    if (!entry.usable(facts)) continue;
    if (auto path = entry.make(facts, context, source)) return path;
  }
  detail::fail(BASP_ERROR_INTERNAL, "no MPI path serves the group");  // the last entry always does
}

PathFacts plan_path_facts(const plan::ExchangePlan& plan, const CollectiveScope& group, const std::string& where,
                          const detail::Deadline& deadline) {
  PathFacts facts;
  facts.group_size = plan.group_size;
  facts.strict = true;
  if (plan.group_size == 1) return facts;
  // Every rank must take the same path, whatever its environment says.
  const TransportWish wish = agree_transport(group, where, "the choice of the MPI path at basp_plan_create", deadline);
  if (wish.least == kWantP2P) {  // p2p anywhere wins: every rank can do it
    facts.want = Want::kP2P;
    return facts;
  }
  BASP_CHECK_ARG(wish.least == wish.most || wish.least == kWantAuto,
                 "BASP_MPI_TRANSPORT is cma (or direct) on some ranks of ", where,
                 " and staged on others: set the same value on every rank");
  facts.want = static_cast<Want>(wish.most);  // kAuto when nobody forced a path
  // Same node? (Blocking, but every rank is inside this call since the bounded round above.)
  MPI_Comm node = MPI_COMM_NULL;
  BASP_MPI_CHECK(MPI_Comm_split_type(group.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  OwnedComm node_owned(node);
  int node_size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(node, &node_size));
  facts.one_node = node_size == plan.group_size;  // the same answer on every rank of the group
  facts.rows_suit_cma = rows_suit_cma(plan);
  return facts;
}

std::unique_ptr<PathSource> plan_path_source(const plan::ExchangePlan& plan, const CollectiveScope& group,
                                             const detail::Deadline& deadline) {
  return std::make_unique<PlanSource>(plan, group, deadline);
}

bool BatchLocality::cma_group(const std::vector<int32_t>& members) const {
  return want != Want::kP2P && on_one_working_node(cma_node, members);
}

BatchLocality find_batch_locality(const CollectiveScope& world, int32_t world_rank, const std::vector<uint64_t>& nodes,
                                  const detail::Deadline& deadline) {
  const TransportWish wish =
      agree_transport(world, world.where, "the choice of the batch plans' MPI paths at comm creation", deadline);
  BASP_CHECK_ARG(wish.least == wish.most, "BASP_MPI_TRANSPORT is not the same on every rank of ", world.where,
                 " (a comm for batch plans needs one value: its groups choose their paths without talking)");
  BatchLocality out;
  out.want = static_cast<Want>(wish.least);
  const bool forced_cma = out.want == Want::kCma;
  const auto n = world.members.size();
  if (out.want == Want::kP2P || nodes.size() != n) return out;  // the same on every rank: no probe round
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
    BASP_CHECK(!forced_cma || out.cma_node[r] >= 0, BASP_ERROR_UNSUPPORTED,
               "BASP_MPI_TRANSPORT=cma was requested but cross-memory attach (process_vm_readv) is not permitted "
               "between the ranks of world rank ",
               r, "'s node");
  }
  for (size_t r = 0; r < n; ++r) out.pids.push_back(static_cast<pid_t>(all[r].pid));
  return out;
}

PathFacts batch_path_facts(const plan::ExchangePlan& plan, const BatchLocality& locality, const NodeStaging& staging,
                           const std::vector<int32_t>& members) {
  PathFacts facts;
  facts.group_size = plan.group_size;
  facts.want = locality.want;
  facts.one_node = plan.group_size > 1 && staging.one_node(members);
  facts.rows_suit_cma = rows_suit_cma(plan);
  return facts;
}

std::unique_ptr<PathSource> batch_path_source(const BatchLocality& locality, NodeStaging& staging,
                                              const std::vector<int32_t>& members, MPI_Comm data) {
  return std::make_unique<BatchSource>(locality, staging, members, data);
}

}  // namespace basp::transport::mpi
