#include "transport/mpi/mpi_backend.h"

#include <utility>

#include "common/error.h"
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

class MpiGroupTransport final : public GroupTransport {
 public:
  MpiGroupTransport(OwnedComm world, OwnedComm group, GroupSpec spec)
      : world_(std::move(world)),
        group_(std::move(group)),
        channel_(dup_with_errors_return(group_.comm.get()).release(), spec),
        bootstrap_(scope_of(group_, spec)) {}

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
    s.labels = spec.members;
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
};

class MpiConnector final : public Connector {
 public:
  explicit MpiConnector(MpiBootstrap& parent) : parent_(parent) {}

  // The MPI backend works in host memory: a rank contributes its node, no GPU.
  topology::RankLocality locality() override { return topology::make_rank_locality(topology::local_node_identity()); }

  std::unique_ptr<GroupTransport> connect(const GroupSpec& spec, const detail::Deadline&) override {
    // Blocking, but every rank of the parent is inside this call since the bounded rounds before.
    OwnedComm world = dup_with_errors_return(parent_.comm());
    MPI_Comm group = MPI_COMM_NULL;
    BASP_MPI_CHECK(MPI_Comm_split(world.get(), spec.index, spec.position, &group));
    OwnedComm group_owned(group);
    BASP_MPI_CHECK(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
    return std::make_unique<MpiGroupTransport>(std::move(world), std::move(group_owned), spec);
  }

 private:
  MpiBootstrap& parent_;
};

}  // namespace

std::unique_ptr<Connector> make_connector(MpiBootstrap& parent) { return std::make_unique<MpiConnector>(parent); }

}  // namespace basp::transport::mpi
