#include "transport/mpi/mpi_backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/keep_forever.h"
#include "topology/node_identity.h"
#include "transport/mpi/control.h"
#include "transport/mpi/mpi_collectives.h"
#include "transport/mpi/mpi_executor.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/shared_memory.h"

namespace basp::transport::mpi {
namespace {

// A communicator that is leaked instead of freed once a collective on it was abandoned (mpi_collectives.h):
// Open MPI would otherwise progress the abandoned operation on a freed communicator and crash.
struct GuardedComm {
  OwnedComm comm;
  bool abandoned = false;
  explicit GuardedComm(OwnedComm c) : comm(std::move(c)) {}
  GuardedComm(const GuardedComm&) = delete;
  GuardedComm& operator=(const GuardedComm&) = delete;
  ~GuardedComm() {
    if (abandoned) comm.leak();
  }
};

// The world-level resources of the comm's batch plans (docs/batch.md), made once at comm creation: a duplicate of
// the parent for their control messages (one channel over the world, one tag), one for their data messages, the
// workspace pool (one workspace per direction: workspace.h), and the flag that serialises their executes.
class MpiBatchTransport final : public BatchTransport {
 public:
  // Collective over the world: the locality round (find_batch_locality) runs on `collectives`.
  MpiBatchTransport(OwnedComm control, OwnedComm data, OwnedComm collectives, GroupSpec world,
                    const std::vector<uint64_t>& nodes, const detail::Deadline& deadline)
      : control_(control.release(), world),
        data_(std::move(data)),
        collectives_(std::move(collectives)),
        bootstrap_(scope_of(collectives_, world)),
        locality_(find_batch_locality(bootstrap_.scope(), world.position, nodes, deadline)) {
    // The same verdicts on every rank: the transport wish is agreed, and set_up's rounds are collective.
    if (locality_.want == Want::kP2P || locality_.want == Want::kCma) return;
    staging_.set_up(bootstrap_.scope(), world.position, nodes, deadline);
    for (size_t r = 0; r < world.members.size() && locality_.want == Want::kStaged; ++r) {
      BASP_CHECK(staging_.usable(static_cast<int32_t>(r)), BASP_ERROR_UNSUPPORTED,
                 "BASP_MPI_TRANSPORT=staged was requested but the ranks of world rank ", r,
                 "'s node cannot map each other's memory (memfd through /proc)");
    }
  }

  Bootstrap& world() override { return bootstrap_; }

  std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan,
                                                    const GroupInBatch& group) override {
    return mpi::make_batch_executor(plan, group, locality_, staging_, control_, data_.get(), pool_, busy_);
  }

 private:
  static CollectiveScope scope_of(GuardedComm& comm, const GroupSpec& spec) {
    CollectiveScope s;
    s.comm = comm.comm.get();
    s.members = spec.members;
    s.where = spec.where;
    s.abandoned = &comm.abandoned;
    return s;
  }

  ControlChannel control_;
  OwnedComm data_;
  GuardedComm collectives_;
  MpiBootstrap bootstrap_;
  BatchLocality locality_;  // where a group may take the cma path, found once
  NodeStaging staging_;     // the per-node staging regions of the staged path
  DirectionWorkspaces pool_{std::make_shared<Workspace>("the batch plans' scatter workspace"),
                            std::make_shared<Workspace>("the batch plans' gather workspace")};
  std::atomic<bool> busy_{false};
};

class MpiGroupTransport final : public GroupTransport {
 public:
  MpiGroupTransport(OwnedComm world, OwnedComm group, GroupSpec spec, const detail::Deadline& deadline)
      : world_(std::move(world)),
        group_(std::move(group)),
        channel_(dup_with_errors_return(group_.comm.get()).release(), spec),
        bootstrap_(scope_of(group_, spec)) {
    if (spec.batch_capacity > 0) {
      // Collective over the parent (every rank is inside comm creation); the world as one group for messages.
      GroupSpec all = world_spec(spec);
      OwnedComm control = dup_with_errors_return(world_.get());  // in this order on every rank: collective
      OwnedComm data = dup_with_errors_return(world_.get());
      OwnedComm collectives = dup_with_errors_return(world_.get());
      batch_ = std::make_unique<MpiBatchTransport>(std::move(control), std::move(data), std::move(collectives),
                                                   std::move(all), spec.world_nodes, deadline);
    }
  }

  BatchTransport* batch() override { return batch_.get(); }

  basp_backend_t backend() const override { return BASP_BACKEND_MPI; }
  Bootstrap& group() override { return bootstrap_; }
  std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context) override {
    return mpi::make_executor(plan, context, bootstrap_.scope(), channel_, memory_);
  }
  void* alloc_shared(size_t bytes) override {
    return memory_->allocate(bootstrap_.scope(), channel_.group().position, bytes, nullptr, deadline(),
                             "basp_mem_alloc");
  }
  void free_shared(void* ptr) override {
    memory_->release(bootstrap_.scope(), channel_.group().position, ptr, deadline(), "basp_mem_free");
  }

 private:
  static CollectiveScope scope_of(GuardedComm& comm, const GroupSpec& spec) {
    CollectiveScope s;
    s.comm = comm.comm.get();
    s.members = spec.members;
    s.where = spec.where;
    s.abandoned = &comm.abandoned;
    return s;
  }
  detail::Deadline deadline() const { return detail::Deadline(channel_.group().timeout_ms); }

  OwnedComm world_;  // the comm's private duplicate of the parent
  GuardedComm group_;
  ControlChannel channel_;
  MpiBootstrap bootstrap_;
  // Shared by the comm's plans; outlives the group communicator's users through their shared_ptr.
  std::shared_ptr<SharedMemory> memory_ = std::make_shared<SharedMemory>();
  std::unique_ptr<MpiBatchTransport> batch_;
};

class MpiConnector final : public Connector {
 public:
  explicit MpiConnector(MpiBootstrap& parent) : parent_(parent) {}

  // The MPI backend works in host memory: a rank contributes its node, no GPU.
  topology::RankLocality locality() override { return topology::make_rank_locality(topology::local_node_identity()); }

  std::unique_ptr<GroupTransport> connect(const GroupSpec& spec, const detail::Deadline& deadline) override {
    // Blocking, but every rank of the parent is inside this call since the bounded rounds before.
    OwnedComm world = dup_with_errors_return(parent_.comm());
    MPI_Comm group = MPI_COMM_NULL;
    BASP_MPI_CHECK(MPI_Comm_split(world.get(), spec.index, spec.position, &group));
    OwnedComm group_owned(group);
    BASP_MPI_CHECK(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
    return std::make_unique<MpiGroupTransport>(std::move(world), std::move(group_owned), spec, deadline);
  }

 private:
  MpiBootstrap& parent_;
};

}  // namespace

std::unique_ptr<Connector> make_connector(MpiBootstrap& parent) { return std::make_unique<MpiConnector>(parent); }

}  // namespace basp::transport::mpi
