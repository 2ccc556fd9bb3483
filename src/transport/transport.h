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
};

// What an executor knows of its plan beyond the arithmetic.
struct PlanContext {
  int64_t plan_id = 0;  // creation order in the comm: the same on every rank of the group
  std::string call;     // the call that makes it, for messages ("basp_plan_create")
};

class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  // inputs/outputs hold one pointer per tensor of the plan, already validated (runtime/plan.h); `tokens` is the
  // call's token count per sequence (THD: of the group's stream; else the plan's seq_len), at most the plan's;
  // `stream` is backend-specific (NULL for MPI).
  virtual void scatter(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) = 0;
  virtual void gather(int64_t tokens, const void* const* inputs, void* const* outputs, void* stream) = 0;
  // A scatter (or gather) this rank cannot make: its own checks of its arguments failed with `own`. A backend whose
  // exchanges talk before moving data tells the group, so that the peers fail at once instead of waiting for this
  // rank; then (or at once, elsewhere) it throws `own`.
  [[noreturn]] virtual void fail(bool scatter, int64_t tokens, const std::exception_ptr& own) {
    (void)scatter;
    (void)tokens;
    std::rethrow_exception(own);
  }
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
