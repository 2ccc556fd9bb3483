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
#include "transport/mpi/path_choice.h"
#include "transport/mpi/shared_memory.h"
#include "transport/transport.h"

namespace basp::transport::mpi {

// Collective over the group (`group.comm`): picks the plan's path for the whole group (path_choice.h: every rank
// reaches the same verdict) and sets up what it needs.
std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context,
                                            const CollectiveScope& group, ControlChannel& channel,
                                            std::shared_ptr<SharedMemory> memory);

// Not collective: a batch plan's executor (docs/batch.md), over the comm's world-level resources: `world` carries
// its control messages, `data` (the comm's duplicate of the world) its data messages, `pool` its workspaces,
// `staging` the per-node staging; `busy` is the comm's flag that serialises batch executes. Its path is chosen
// locally (path_choice.h), the same on every rank of the group.
std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const GroupInBatch& batch,
                                                  const BatchLocality& locality, NodeStaging& staging,
                                                  ControlChannel& world, MPI_Comm data, const DirectionWorkspaces& pool,
                                                  std::atomic<bool>& busy);

}  // namespace basp::transport::mpi
