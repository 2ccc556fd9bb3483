// The MPI backend's plan executor: the plan's exchange path (exchange_path.h), chosen once, collectively, at plan
// creation, and the plan's control messages (control.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "plan/exchange.h"
#include "transport/mpi/control.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_collectives.h"
#include "transport/mpi/node_staging.h"
#include "transport/mpi/shared_memory.h"
#include "transport/transport.h"

namespace basp::transport::mpi {

// Collective over the group (`group.comm`): picks the plan's path for the whole group (every rank reaches the same
// verdict) and sets up what it needs. K = 1: local. One node: staged (shared-memory staging regions, any row size),
// else cma (cross-memory attach, rows of 1 KiB and more), else p2p; anywhere else p2p. The environment variable
// BASP_MPI_TRANSPORT = auto | p2p | cma | staged (direct: cma's old name) forces one on every rank.
std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context,
                                            const CollectiveScope& group, ControlChannel& channel,
                                            std::shared_ptr<SharedMemory> memory);

// What a batch plan's group needs to choose its path locally (docs/batch.md): found once, at comm creation.
struct BatchLocality {
  std::vector<pid_t> pids;        // every world rank's process
  std::vector<int32_t> cma_node;  // every world rank's node (an index), -1 where cross-memory attach does not
                                  // work between every two ranks of its node (or the nodes are not known)
  bool forced_cma = false;        // BASP_MPI_TRANSPORT=cma (or direct): cma for rows of any size, never staged
  bool forced_staged = false;     // BASP_MPI_TRANSPORT=staged
  bool p2p_only = false;          // BASP_MPI_TRANSPORT=p2p
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

// Not collective: a batch plan's executor (docs/batch.md), over the comm's world-level resources: `world` carries
// its control messages, `data` (the comm's duplicate of the world) its data messages, `pool` its workspace,
// `staging` the per-node staging; `busy` is the comm's flag that serialises batch executes. Chosen locally, the same
// on every rank of the group: K = 1: local; a group on one node with staging: staged (not when cma is forced); else
// a group on one node where `locality` allows cma, its rows of 1 KiB and more (any size when forced): cma; else p2p
// to the group's world ranks.
std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const GroupInBatch& batch,
                                                  const BatchLocality& locality, NodeStaging& staging,
                                                  ControlChannel& world, MPI_Comm data, std::shared_ptr<Workspace> pool,
                                                  std::atomic<bool>& busy);

}  // namespace basp::transport::mpi
