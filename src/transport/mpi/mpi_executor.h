// The MPI backend's plan executor: the plan's exchange path (exchange_path.h), chosen once, collectively, at plan
// creation, and the plan's control messages (control.h).
#pragma once

#include <atomic>
#include <memory>

#include "plan/exchange.h"
#include "transport/mpi/control.h"
#include "transport/mpi/exchange_path.h"
#include "transport/mpi/mpi_collectives.h"
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

// Not collective: a batch plan's executor (docs/batch.md), over the comm's world-level resources: `world` carries
// its control messages, `data` (the comm's duplicate of the world) its data messages, `pool` its workspace;
// `busy` is the comm's flag that serialises batch executes. K = 1: local; else p2p to the group's world ranks.
std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan, const BatchGroup& batch,
                                                  ControlChannel& world, MPI_Comm data, WorkspacePool& pool,
                                                  std::atomic<bool>& busy);

}  // namespace basp::transport::mpi
