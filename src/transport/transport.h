// Moving bytes: the small interface every backend implements (MPI on host memory, NCCL on device memory). The
// transport is a leaf: it knows the plan's arithmetic (plan/, layout/) and the machine (topology/), never the
// objects behind the handles (runtime/), which own it.
//
//   Connector       one backend's part of comm creation over a parent Bootstrap (runtime/create.h runs it)
//   GroupTransport  one rank's connection to its group: executors, shared memory, the group's collectives
//   PlanExecutor    everything one plan's execute needs (workspace, datatypes, its exchange path), made once, so
//                   that scatter and gather allocate nothing and create no communicator
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "common/deadline.h"
#include "common/direction.h"
#include "plan/exchange.h"
#include "topology/rank_locality.h"
#include "transport/bootstrap.h"

namespace basp::transport {

// Where a rank sits once the groups are formed.
struct GroupSpec {
  int32_t index = 0;             // the group: the color of a communicator split
  int32_t position = 0;          // this rank's position in it: the key
  std::vector<int32_t> members;  // world rank of each position
  std::string where;             // "group 0 (world ranks 0..3)"
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;
  // > 0: the comm also serves batch plans (docs/batch.md) of at most this many sequence-side tokens per rank, and
  // the connector prepares their world-level resources once (GroupTransport::batch()).
  int64_t batch_capacity = 0;
  int32_t world_rank = 0;  // this rank in the parent
  int32_t world_size = 0;
  // Batch comms: every world rank's node (topology::RankLocality::node_key, as the planner sees it), from which a
  // batch plan's group chooses its path locally; empty: not known (a group of several ranks then takes p2p).
  std::vector<uint64_t> world_nodes;
};

// The one builder of a GroupSpec: the rank at `position` of group `index`, whose `members` are world ranks by
// position, in a world of `world_size` ranks; batch_capacity and world_nodes are left for comm creation to set.
GroupSpec make_group_spec(int32_t index, int32_t position, std::vector<int32_t> members, std::string where,
                          int32_t world_size, int64_t timeout_ms);

// Batch comms: the whole world of `spec` as one group (position = world rank), for the batch plans' world-level
// messages and collectives.
GroupSpec world_spec(const GroupSpec& spec);

// One batch plan's group, seen from one of its ranks: made locally from a membership every rank computes alike.
struct GroupInBatch {
  GroupSpec group;           // members: world ranks by position; index: the group's index in the membership
  int64_t batch_id = 0;      // the comm's count of batch plans before this one: the same on every rank
  uint64_t fingerprint = 0;  // of the whole batch description: what every rank of the group must agree on
};

// What an executor knows of its plan beyond the arithmetic.
struct PlanContext {
  int64_t plan_id = 0;  // creation order in the comm: the same on every rank of the group
  std::string call;     // the call that makes it, for messages ("basp_plan_create")
};

// What the executes of a backend's executors take: checked by the runtime before every execute.
struct ExecuteNeeds {
  bool device_memory = false;  // the exchanges read and write device memory (else host memory)
  bool stream = false;         // executes are enqueued on the caller's stream (else it must be NULL)
  const char* backend = "";    // for messages: "MPI", "NCCL"
};

// Split-phase head chunks that the device orders (the NCCL backend): a start enqueues the chunk's exchange and
// returns, a test queries whether it has ended, a wait makes the stream the start took wait for it; nothing runs on
// the comm's progress thread and the host never blocks. The runtime keeps the rounds' rules (runtime/plan.h).
class StreamChunks {
 public:
  virtual ~StreamChunks() = default;
  // Enqueues head chunk call.chunk of an exchange in `direction`, ordered after the work enqueued on `stream`.
  virtual void start(Direction direction, const plan::CallGeometry& call, const void* const* inputs,
                     void* const* outputs, void* stream) = 0;
  // Whether chunk `chunk`'s exchange, started and not waited for, has ended; never blocks.
  virtual bool test(Direction direction, int32_t chunk) = 0;
  // Makes the stream the chunk's start took wait for its end, and frees the chunk; never blocks the host.
  virtual void wait(Direction direction, int32_t chunk) = 0;
  // basp_plan_destroy with chunks started and not waited for: waits for them to end up to `deadline`; false when
  // some did not (their communicator is then aborted, which ends them).
  virtual bool drain(const detail::Deadline& deadline) = 0;
};

class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  // The plan it executes, and what its executes take.
  virtual const plan::ExchangePlan& plan() const = 0;
  virtual const ExecuteNeeds& needs() const = 0;
  // One scatter or gather (`direction`). inputs/outputs hold one pointer per tensor of the plan, already validated
  // (runtime/plan.h); `call` is the call's geometry (plan().call(tokens), tokens per sequence: THD: of the group's
  // stream; else the plan's seq_len; at most the plan's); `stream` is backend-specific (NULL for MPI).
  virtual void execute(Direction direction, const plan::CallGeometry& call, const void* const* inputs,
                       void* const* outputs, void* stream) = 0;
  void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) {
    execute(Direction::kScatter, plan().call(tokens), inputs, outputs, stream);
  }
  void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) {
    execute(Direction::kGather, plan().call(tokens), inputs, outputs, stream);
  }
  // An execute this rank cannot make: its own checks of its arguments failed with `own`. A backend whose exchanges
  // talk before moving data tells the group, so that the peers fail at once instead of waiting for this rank; then
  // (or at once, elsewhere) it throws `own`. `chunk`: the head chunk the execute asked for.
  [[noreturn]] virtual void fail(Direction direction, int64_t tokens, plan::HeadChunk chunk,
                                 const std::exception_ptr& own) {
    (void)direction;
    (void)tokens;
    (void)chunk;
    std::rethrow_exception(own);
  }
  // Whether this executor's exchanges may run on the comm's progress thread while the caller's thread makes other
  // calls (split-phase head chunks, runtime/progress.h); throws BASP_ERROR_UNSUPPORTED naming why not.
  virtual void check_split_phase() const;
  // The executor's device-ordered split-phase chunks (StreamChunks), or nullptr: its chunks then run on the comm's
  // progress thread, blocking, as execute() runs them.
  virtual StreamChunks* stream_chunks() { return nullptr; }
  // The fingerprint of the document boundaries of the executes that follow (0: none set). A backend whose exchanges
  // talk before moving data makes it part of what the group's ranks must agree on.
  virtual void set_documents(uint64_t fingerprint) { (void)fingerprint; }
  virtual int64_t workspace_bytes() const = 0;
  // The path fixed at plan creation.
  virtual basp_path_t plan_path() const = 0;
  // The path of the last scatter/gather (BASP_PATH_NONE before the first). Any thread, any time.
  virtual basp_path_t last_path() const = 0;
  // Control rounds (small messages every rank of the group exchanges with every other) of the last scatter or
  // gather: each path documents its count (docs/design.md). Any thread, any time.
  virtual int32_t last_control_rounds() const = 0;
};

// The world-level resources of batch plans (docs/batch.md): made once at comm creation, shared by every batch
// plan of the comm, whose executors are then made locally, without talking to any rank and without creating a
// communicator. Executes of one comm's batch plans run one at a time (checked: INVALID_ARGUMENT otherwise).
class BatchTransport {
 public:
  virtual ~BatchTransport() = default;
  // Not collective. The executor of `plan` (this rank's part of its group's exchange in the batch).
  virtual std::unique_ptr<PlanExecutor> make_batch_executor(const plan::ExchangePlan& plan,
                                                            const GroupInBatch& group) = 0;
  // Host-side collectives over the whole world (calibration: basp_comm_calibrate).
  virtual Bootstrap& world() = 0;

  // Memory that this backend's exchanges read and write (host memory on MPI, device memory on NCCL), zeroed, and
  // the stream its executes take: for calibration's own exchanges, which time an execute up to its end (finish).
  class Buffer {
   public:
    virtual ~Buffer() = default;
    virtual void* get() = 0;
  };
  virtual std::unique_ptr<Buffer> buffer(int64_t bytes);
  virtual void* stream() { return nullptr; }
  // Waits until the executes enqueued on `stream` have ended (nothing on a backend whose executes block).
  virtual void finish(void* stream) { (void)stream; }
};

class GroupTransport {
 public:
  virtual ~GroupTransport() = default;
  virtual basp_backend_t backend() const = 0;
  // The group's host-side collectives: the consistency checks of plan creation and basp_mem_alloc/free.
  virtual Bootstrap& group() = 0;
  // Collective over the group, after its consistency check.
  virtual std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan, const PlanContext& context) = 0;
  // Collective over the group: memory the group's ranks reach directly (basp_mem_alloc), and its release.
  virtual void* alloc_shared(size_t bytes);
  virtual void free_shared(void* ptr);
  // An error the backend raised asynchronously (NCCL's ncclCommGetAsyncError): BASP_SUCCESS when there is none,
  // else its status, with the detail in `message`. Backends that fail synchronously (MPI) never have one.
  virtual basp_status_t async_error(std::string& message);
  // Whether abort() is supported: only by backends that can abort one communicator without ending the process.
  virtual bool abortable() const { return false; }
  // Stops the backend's outstanding operations and releases its communicators (abortable backends only).
  virtual void abort() {}
  // The batch plans' resources: nullptr unless the comm was made for batch plans on a backend that has them.
  virtual BatchTransport* batch() { return nullptr; }
};

// One backend's part of comm creation (runtime/create.h): made before the consistency check without talking to
// any rank, so that a backend this build or this bootstrap cannot serve is a local argument error there.
class Connector {
 public:
  virtual ~Connector() = default;
  // This rank's record for placement. Throws when the rank cannot take part (NCCL: no usable CUDA device); the
  // runtime shares that failure with every rank before anything waits on this one.
  virtual topology::RankLocality locality() = 0;
  // Collective over the parent, after the groups are formed: this rank's group transport, connected.
  virtual std::unique_ptr<GroupTransport> connect(const GroupSpec& group, const detail::Deadline& deadline) = 0;
};

}  // namespace basp::transport
