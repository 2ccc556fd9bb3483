// Comm creation: one algorithm for every constructor of the C ABI, over any parent (transport::Bootstrap) and
// any backend (transport::Connector):
//
//   1. local checks: the config (runtime/options.h), G against N, the backend this entry and this build can serve;
//   2. agree: the consistency check over the parent (runtime/consistency.h), which a rank whose local checks failed
//      joins too, so that every rank fails at once;
//   3. locality: one all-gather of every rank's readiness and locality record (found before step 2); a rank that
//      cannot take part (no CUDA device) makes every rank fail with its reason;
//   4. groups: placement (runtime::plan_groups), the same on every rank;
//   5. connect: the backend's group transport, over the parent.
//
// Steps 3 and 5 each get the whole timeout (every rank is inside the call once step 2 is done). The constructors
// (basp_comm_create_mpi/_nccl/_oob) differ only in the parent they wrap and the connectors they offer. A parent that is
// itself unusable (MPI_COMM_NULL, a NULL ncclComm_t, malformed callbacks) fails on its rank only, before step 2:
// nothing can reach the other ranks then, and they time out.
#pragma once

#include <exception>
#include <functional>
#include <memory>

#include "basp/basp.h"
#include "runtime/comm.h"
#include "runtime/consistency.h"
#include "runtime/options.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace basp::runtime {

// One creation call as the C ABI received it.
struct CreateCall {
  CallKind kind = CallKind::kCommCreateMpi;
  const basp_comm_config_v1* config = nullptr;  // NULL: the caller's struct could not be read
  std::exception_ptr local_error;               // what the marshalling found wrong (unreadable struct, NULL output)
};

// What a constructor adds to the local checks of step 1: throws BASP_ERROR_UNSUPPORTED or INVALID_ARGUMENT when
// this entry or this build cannot serve the options (a backend it cannot make). Talks to no other rank.
using EntryCheck = std::function<void(const CommOptions& options)>;
// The backend's part for options that passed the checks.
using ConnectorFor = std::function<std::unique_ptr<transport::Connector>(const CommOptions& options)>;

// Collective over `parent`: steps 1-5 above.
std::shared_ptr<Comm> create_comm(transport::Bootstrap& parent, const CreateCall& call, const EntryCheck& check,
                                  const ConnectorFor& connector_for);

// For a constructor whose parent could not be made (`parent_error`): the rank's own argument error when it has one
// (it explains the failure best, and fixing it comes first), else the parent's error (which also comes before
// BASP_ERROR_UNSUPPORTED for a backend this build lacks).
[[noreturn]] void fail_without_parent(const CreateCall& call, const EntryCheck& check,
                                      const std::exception_ptr& parent_error);

// The three constructors. Each throws at once when its parent is unusable; otherwise it is create_comm().
std::shared_ptr<Comm> comm_from_mpi(basp_mpi_fint_t parent, const CreateCall& call);
std::shared_ptr<Comm> comm_from_nccl(void* nccl_comm, const CreateCall& call);
// `oob` is NULL and `oob_error` set when the caller's basp_oob_t could not be read.
std::shared_ptr<Comm> comm_from_oob(const basp_oob_v1* oob, const std::exception_ptr& oob_error,
                                    const CreateCall& call);

// The entry check of the NCCL backend in this build: BASP_ERROR_UNSUPPORTED naming `entry` without NCCL.
void require_nccl_build(const char* entry);
// A connector for the NCCL backend over any parent (ncclCommInitRank, the unique id carried by the parent's
// all-gather), after require_nccl_build.
std::unique_ptr<transport::Connector> nccl_init_connector(transport::Bootstrap& parent);

}  // namespace basp::runtime
