#include "transport/nccl/nccl_backend.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "transport/nccl/nccl_executor.h"
#include "transport/nccl/nccl_locality.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

NcclGroupTransport::NcclGroupTransport(std::shared_ptr<GroupComm> comm, const GroupSpec& spec)
    : comm_(comm), spec_(spec), bootstrap_(comm, spec.members, spec.where, spec.position) {}

// On when either name says 1; each is 0 or 1 (the old name too: the table documents both as 0/1 knobs).
bool check_exchanges_from_env() {
  const bool on = env::get_bool("BASP_CHECK_EXCHANGES");
  return env::get_bool("BASP_CHECK_TOKENS") || on;
}

std::unique_ptr<PlanExecutor> NcclGroupTransport::make_executor(const plan::ExchangePlan& plan,
                                                                const PlanContext& context) {
  ExecutorOptions options;
  options.check_exchanges = check_exchanges_from_env();
  options.plan_id = context.plan_id;
  options.where = spec_.where;
  options.timeout_ms = spec_.timeout_ms;
  if (plan.group_size > 1) {
    if (!watch_) watch_ = std::make_shared<ExchangeWatch>(comm_, spec_.timeout_ms);
    options.watch = watch_;
  }
  return nccl::make_executor(comm_, plan, options);
}

void connect_all(GroupComm& comm, size_t size, size_t position, const std::string& where,
                 const detail::Deadline& deadline) {
  // Byte q that position p sends to position q is (p * size + q) mod 256: what arrives is checked too.
  const auto code = [size](size_t from, size_t to) { return static_cast<uint8_t>((from * size + to) & 0xff); };
  const auto mine = static_cast<uint8_t>(position & 0xff);
  std::vector<uint8_t> all(size);
  comm.allgather(&mine, 1, all.data(), "connecting the NCCL communicator of " + where + " (all-gather)", where,
                 deadline);
  for (size_t p = 0; p < size; ++p) {
    BASP_CHECK(all[p] == static_cast<uint8_t>(p & 0xff), BASP_ERROR_INTERNAL, "the ncclAllGather of ", where, " put ",
               static_cast<int>(all[p]), " at position ", p);
  }
  std::vector<uint8_t> out(size);
  std::vector<uint8_t> in(size);
  for (size_t q = 0; q < size; ++q) out[q] = code(position, q);
  comm.alltoall(out.data(), 1, in.data(), "connecting the NCCL communicator of " + where + " (all-to-all)", where,
                deadline);
  for (size_t p = 0; p < size; ++p) {
    BASP_CHECK(in[p] == code(p, position), BASP_ERROR_INTERNAL, "the all-to-all of ", where, " delivered ",
               static_cast<int>(in[p]), " from position ", p);
  }
}

void NcclGroupTransport::connect(const detail::Deadline& deadline) {
  connect_all(*comm_, spec_.members.size(), static_cast<size_t>(spec_.position), spec_.where, deadline);
}

void NcclGroupTransport::set_world(std::shared_ptr<GroupComm> world, const GroupSpec& spec) {
  batch_ = std::make_unique<NcclBatchTransport>(std::move(world), spec);
}

basp_status_t NcclGroupTransport::async_error(std::string& message) {
  const basp_status_t group = comm_->async_error(message);
  if (group != BASP_SUCCESS) return group;
  if (watch_) {
    const basp_status_t overdue = watch_->check(message);
    if (overdue != BASP_SUCCESS) return overdue;
  }
  if (!batch_) return BASP_SUCCESS;
  return batch_->async_error(message);
}

void NcclGroupTransport::abort() {
  comm_->abort();
  if (batch_) batch_->abort();
}

std::unique_ptr<NcclGroupTransport> wrap_group(ncclComm_t group, int device, const GroupSpec& spec) {
  auto owner = std::make_shared<GroupComm>(group, device);
  int size = 0;
  int position = -1;
  BASP_NCCL_CHECK(ncclCommCount(group, &size));
  BASP_NCCL_CHECK(ncclCommUserRank(group, &position));
  BASP_CHECK(size == static_cast<int>(spec.members.size()) && position == spec.position, BASP_ERROR_INTERNAL,
             "the group's NCCL communicator has ", size, " ranks and puts this rank at ", position, "; ", spec.where,
             " has ", spec.members.size(), " and puts it at ", spec.position);
  return std::make_unique<NcclGroupTransport>(std::move(owner), spec);
}

namespace {

std::unique_ptr<NcclGroupTransport> connected(ncclComm_t group, int device, const GroupSpec& spec,
                                              const detail::Deadline& deadline) {
  auto transport = wrap_group(group, device, spec);
  transport->connect(deadline);
  return transport;
}

// Batch comms (spec.batch_capacity > 0, the same on every rank): `world`, a communicator of all the parent's
// ranks, connected to every peer now, becomes the transport's batch world.
std::unique_ptr<GroupTransport> with_world(std::unique_ptr<NcclGroupTransport> transport, ncclComm_t world, int device,
                                           const GroupSpec& spec, const detail::Deadline& deadline) {
  auto owner = std::make_shared<GroupComm>(world, device);
  const GroupSpec all = world_spec(spec);
  connect_all(*owner, all.members.size(), static_cast<size_t>(all.position), all.where, deadline);
  transport->set_world(std::move(owner), all);
  return transport;
}

class SplitConnector final : public Connector {
 public:
  explicit SplitConnector(NcclBootstrap& parent) : parent_(parent) {}
  topology::RankLocality locality() override { return local_gpu_locality(parent_.device()); }
  std::unique_ptr<GroupTransport> connect(const GroupSpec& spec, const detail::Deadline& deadline) override {
    DeviceScope scope(parent_.device());
    ncclComm_t group = split(spec.index, spec.position, deadline);
    auto transport = connected(group, parent_.device(), spec, deadline);
    if (spec.batch_capacity <= 0) return transport;
    // One color for every rank, keyed by world rank: a private duplicate of the parent.
    ncclComm_t world = split(0, spec.world_rank, deadline);
    return with_world(std::move(transport), world, parent_.device(), spec, deadline);
  }

 private:
  // ncclCommSplit into a blocking communicator, whatever the parent's mode. A non-blocking parent (ncclConfig_t
  // blocking = 0, as PyTorch makes with TORCH_NCCL_USE_COMM_NONBLOCKING) may return ncclInProgress: the child is
  // then polled with ncclCommGetAsyncError until it is ready, up to the deadline (then aborted: TIMEOUT).
  ncclComm_t split(int color, int key, const detail::Deadline& deadline) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    ncclComm_t child = nullptr;
    ncclResult_t rc = ncclCommSplit(parent_.parent(), color, key, &child, &config);
    while (rc == ncclInProgress && child != nullptr) {
      ncclResult_t state = ncclInProgress;
      rc = ncclCommGetAsyncError(child, &state);
      if (rc == ncclSuccess) rc = state;
      if (rc != ncclInProgress) break;
      if (deadline.expired()) {
        ncclCommAbort(child);
        detail::fail(BASP_ERROR_TIMEOUT, "ncclCommSplit(color ", color,
                     ") of a non-blocking parent communicator was "
                     "not ready after ",
                     deadline.timeout_ms(), " ms: a rank of the parent is not splitting it");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != ncclSuccess) {
      if (child != nullptr) ncclCommAbort(child);
      detail::fail(BASP_ERROR_NCCL, "ncclCommSplit(color ", color, ") failed: ", error_string(rc));
    }
    BASP_CHECK(child != nullptr, BASP_ERROR_INTERNAL, "ncclCommSplit(color ", color, ") returned no communicator");
    return child;
  }

  NcclBootstrap& parent_;
};

class InitConnector final : public Connector {
 public:
  explicit InitConnector(Bootstrap& parent) : parent_(parent) {}

  topology::RankLocality locality() override {
    device_ = require_device("the NCCL backend");
    return local_gpu_locality(device_);
  }

  std::unique_ptr<GroupTransport> connect(const GroupSpec& spec, const detail::Deadline& deadline) override {
    // The first rank of every group makes the group's id (and world rank 0 the world's, for a batch comm); its
    // ncclGetUniqueId result travels with it, so that a failure there fails the whole group.
    std::vector<Offer> all = offers(spec.position == 0, "the exchange of the groups' NCCL unique ids", deadline);
    const Offer& root = all[static_cast<size_t>(spec.members[0])];
    DeviceScope scope(device_);
    ncclComm_t group = nullptr;
    BASP_NCCL_CHECK(ncclCommInitRank(&group, static_cast<int>(spec.members.size()), root.id, spec.position));
    auto transport = connected(group, device_, spec, deadline);
    if (spec.batch_capacity <= 0) return transport;
    all = offers(spec.world_rank == 0, "the exchange of the batch world's NCCL unique id", deadline);
    ncclComm_t world = nullptr;
    BASP_NCCL_CHECK(ncclCommInitRank(&world, spec.world_size, all[0].id, spec.world_rank));
    return with_world(std::move(transport), world, device_, spec, deadline);
  }

 private:
  struct Offer {
    int32_t result = -1;  // -1: this rank makes no id
    ncclUniqueId id;
  };

  // Every rank's offer (an id where `make`); every rank checks every offer, so that a failure anywhere fails every
  // rank, not one group only.
  std::vector<Offer> offers(bool make, const char* step, const detail::Deadline& deadline) {
    Offer mine{};
    mine.result = -1;
    if (make) mine.result = static_cast<int32_t>(ncclGetUniqueId(&mine.id));
    std::vector<Offer> all(static_cast<size_t>(parent_.size()));
    parent_.allgather(&mine, sizeof(Offer), all.data(), step, deadline);
    for (size_t r = 0; r < all.size(); ++r) {
      BASP_CHECK(all[r].result == -1 || all[r].result == ncclSuccess, BASP_ERROR_NCCL,
                 "ncclGetUniqueId failed on world rank ", parent_.members()[r], " (", step,
                 "): ", ncclGetErrorString(static_cast<ncclResult_t>(all[r].result)));
    }
    return all;
  }

  Bootstrap& parent_;
  int device_ = -1;
};

}  // namespace

std::unique_ptr<Connector> make_split_connector(NcclBootstrap& parent) {
  return std::make_unique<SplitConnector>(parent);
}

std::unique_ptr<Connector> make_init_connector(Bootstrap& parent) { return std::make_unique<InitConnector>(parent); }

}  // namespace basp::transport::nccl
