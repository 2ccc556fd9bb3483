// The NCCL backend (device memory): its part of comm creation, and the group transport it connects (one NCCL
// communicator per group, nccl_group_comm.h, and one executor per plan, nccl_executor.h).
//
// NCCL connects peers lazily, inside the first collective that needs a connection, and that wait has no timeout;
// so a new group communicator is connected at creation, while every rank is known to be inside comm creation: a
// one-byte all-gather of the positions (the connections of the consistency checks) and a one-byte-per-peer
// all-to-all (those of the exchange), both checked for what they deliver. ncclCommSplit and ncclCommInitRank
// themselves have no timeout either: they run only after every rank passed the bounded rounds before them.
#pragma once

#include <nccl.h>

#include <memory>

#include "transport/bootstrap.h"
#include "transport/nccl/exchange_watch.h"
#include "transport/nccl/nccl_batch.h"
#include "transport/nccl/nccl_bootstrap.h"
#include "transport/nccl/nccl_group_comm.h"
#include "transport/transport.h"

namespace basp::transport::nccl {

class NcclGroupTransport final : public GroupTransport {
 public:
  NcclGroupTransport(std::shared_ptr<GroupComm> comm, const GroupSpec& spec);
  basp_backend_t backend() const override { return BASP_BACKEND_NCCL; }
  Bootstrap& group() override { return bootstrap_; }
  std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context) override;
  basp_status_t async_error(std::string& message) override;
  bool abortable() const override { return true; }
  void abort() override;
  BatchTransport* batch() override { return batch_.get(); }

  // Collective over the group: the warm-up described above.
  void connect(const detail::Deadline& deadline);
  const std::shared_ptr<GroupComm>& group_comm() const { return comm_; }
  // Batch comms: the world communicator (all of the parent's ranks, this rank at `world.position`), already
  // connected (connect_all); the transport's batch plans run on it.
  void set_world(std::shared_ptr<GroupComm> world, const GroupSpec& spec);

 private:
  std::shared_ptr<GroupComm> comm_;
  // The deadline of the group communicator's exchanges (exchange_watch.h), made with the first plan that can hang
  // (it takes a CUDA event) and shared by every plan of the group.
  std::shared_ptr<ExchangeWatch> watch_;
  GroupSpec spec_;
  NcclBootstrap bootstrap_;
  std::unique_ptr<NcclBatchTransport> batch_;
};

// BASP_CHECK_EXCHANGES (nccl_executor.h), read at plan creation: unset or "0" off, "1" on; any other value is
// INVALID_ARGUMENT naming it. BASP_CHECK_TOKENS=1, its name before 0.6, also turns it on.
bool check_exchanges_from_env();

// Collective over `comm` (`size` ranks, this one at `position`): the warm-up described above, which makes every
// peer connection of the communicator while every rank is known to be inside comm creation.
void connect_all(GroupComm& comm, size_t size, size_t position, const std::string& where,
                 const detail::Deadline& deadline);

// basp_comm_create_nccl: ncclCommSplit of the parent (color = group, key = position). `parent` must outlive it.
std::unique_ptr<Connector> make_split_connector(NcclBootstrap& parent);
// Any other parent (MPI, out-of-band): the group's first rank makes an ncclUniqueId, the parent's all-gather carries
// it to the group, ncclCommInitRank, on the calling thread's current CUDA device. `parent` must outlive it.
std::unique_ptr<Connector> make_init_connector(Bootstrap& parent);

// A group communicator that already exists, wrapped as this rank's group transport (not connected): for tests.
std::unique_ptr<NcclGroupTransport> wrap_group(ncclComm_t group, int device, const GroupSpec& spec);

}  // namespace basp::transport::nccl
