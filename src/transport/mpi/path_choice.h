// The choice of an MPI plan's exchange path: one ordered table (path_choice.cpp), each entry usable(facts) and
// make(context, source), walked alike for plans and batch plans. The facts are gathered once: for a plan
// collectively at its creation (the group's agreed BASP_MPI_TRANSPORT, whether it lies on one node), for a batch
// plan from the comm's locality, found at comm creation (BatchLocality), without talking. What only a try can tell
// (the staging regions a plan's group maps, the cross-memory-attach probe) is the source's: collective for a plan,
// local for a batch plan.
//
// The order: local (K = 1); p2p when forced; staged on one node (any row size); cma on one node where cross-memory
// attach works (rows of 1 KiB and more, any size when forced); p2p anywhere. BASP_MPI_TRANSPORT = auto | p2p | cma |
// staged (direct: cma's old name) forces one on every rank; a plan whose forced path cannot serve its group is
// BASP_ERROR_UNSUPPORTED (a batch comm checks every node at its creation, and a group across nodes takes p2p).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/deadline.h"
#include "plan/exchange.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_collectives.h"
#include "transport/mpi/node_staging.h"

namespace basp::transport::mpi {

// BASP_MPI_TRANSPORT, agreed over the group (or the batch comm's world).
enum class Want : int32_t { kP2P = 0, kAuto = 1, kCma = 2, kStaged = 3 };

struct PathFacts {
  int32_t group_size = 1;
  Want want = Want::kAuto;
  bool one_node = false;       // the group on one node (a batch plan: one node with the comm's staging)
  bool rows_suit_cma = false;  // every head-sharded row long enough for cross-memory attach to beat pack + send
  bool strict = false;         // a forced path that cannot serve is an error here (plans), not p2p (batch plans)
};

// What the table's entries make their paths of, where facts alone cannot tell.
class PathSource {
 public:
  virtual ~PathSource() = default;
  // The staged path; nullptr (on every rank alike) when the group's ranks cannot map each other's memory.
  virtual std::unique_ptr<ExchangePath> staged(const PathContext& context) = 0;
  // Whether every rank of the group can read every other one's memory with cross-memory attach; the process of
  // each position in `pids`. `forced`: BASP_MPI_TRANSPORT=cma.
  virtual bool cma(const PathFacts& facts, std::vector<pid_t>& pids) = 0;
  // The p2p path's data communicator.
  virtual DataComm data() = 0;
};

// Walks the table. Every rank of the group reaches the same verdict from the same facts.
std::unique_ptr<ExchangePath> choose_path(const PathFacts& facts, const PathContext& context, PathSource& source);

// A plan's facts and source, collective over `group` (its group communicator, every rank inside plan creation).
// A BASP_MPI_TRANSPORT that is not the same wish on every rank is BASP_ERROR_INVALID_ARGUMENT on every rank.
PathFacts plan_path_facts(const plan::ExchangePlan& plan, const CollectiveScope& group, const std::string& where,
                          const detail::Deadline& deadline);
std::unique_ptr<PathSource> plan_path_source(const plan::ExchangePlan& plan, const CollectiveScope& group,
                                             const detail::Deadline& deadline);

// What a batch plan's group needs to choose its path locally (docs/batch.md): found once, at comm creation.
struct BatchLocality {
  std::vector<pid_t> pids;        // every world rank's process
  std::vector<int32_t> cma_node;  // every world rank's node (an index), -1 where cross-memory attach does not
                                  // work between every two ranks of its node (or the nodes are not known)
  Want want = Want::kAuto;        // BASP_MPI_TRANSPORT, the same on every rank
  // Whether the group of these world ranks (two or more) may take the cma path: all on one node where it works.
  bool cma_group(const std::vector<int32_t>& members) const;
};

// Collective over the world (`world.comm`, at comm creation): BASP_MPI_TRANSPORT agreed on every rank, every
// rank's process and a probe of cross-memory attach between the ranks of each node of `nodes` (every world rank's
// node key). A value that is not the same on every rank, or not one of auto, p2p, cma, staged, direct, is
// BASP_ERROR_INVALID_ARGUMENT on every rank; cma forced where some node's ranks cannot read each other's memory is
// BASP_ERROR_UNSUPPORTED.
BatchLocality find_batch_locality(const CollectiveScope& world, int32_t world_rank, const std::vector<uint64_t>& nodes,
                                  const detail::Deadline& deadline);

// A batch plan's facts and source (`members`: its group's world ranks; `data`: the comm's data communicator).
PathFacts batch_path_facts(const plan::ExchangePlan& plan, const BatchLocality& locality, const NodeStaging& staging,
                           const std::vector<int32_t>& members);
std::unique_ptr<PathSource> batch_path_source(const BatchLocality& locality, NodeStaging& staging,
                                              const std::vector<int32_t>& members, MPI_Comm data);

}  // namespace basp::transport::mpi
