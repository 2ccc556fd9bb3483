// Waiting for MPI requests against the comm's deadline (docs/reliability.md): every blocking step of the MPI
// backend posts non-blocking operations and completes them here, polling MPI_Testall/MPI_Testany, instead of
// MPI_Wait*, so that a rank that never joins makes the others fail with BASP_ERROR_TIMEOUT instead of hanging.
//
// What a timed-out wait leaves behind matters as much as the timeout:
//  - point-to-point requests stay for the caller, who drops them with drop_requests(): receives that no message
//    matched yet are cancelled (MPI_Cancel succeeds, nothing lands later); sends are released with
//    MPI_Request_free (MPI cannot take a send back: it completes when a late peer receives it, or never), so
//    their buffers must stay allocated (the executor keeps its workspace; docs/reliability.md says what this
//    means for a gather's inputs);
//  - collective requests (MPI_Iallreduce, ...) can be neither cancelled nor freed: they are abandoned. Their
//    buffers must stay allocated and their communicator must never be freed, because any later MPI call of the
//    process may progress them (Open MPI dereferences a freed communicator there and crashes).
// Neither path allocates before the deadline expires: the execute path stays allocation-free.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace basp::transport::mpi {

enum class Requests { kPointToPoint, kCollective };

// Who a wait is waiting for, for the timeout message. `members` maps group positions to world ranks; `peer_of`
// (optional, one entry per request) gives the position of the peer of each point-to-point request.
struct WaitLabel {
  const std::string* where = nullptr;             // "group 0 (world ranks 0..3)"
  const std::vector<int32_t>* members = nullptr;  // world rank of each position of the group
  const int32_t* peer_of = nullptr;
};

// Completes `requests[0..n)` or throws BASP_ERROR_TIMEOUT (message: `step`, the label, the time waited and, for
// point-to-point requests with peer_of, the world ranks still pending). On timeout collective requests are
// abandoned (MPI_REQUEST_NULL); point-to-point ones are left for drop_requests().
void wait_all(MPI_Request* requests, int n, Requests kind, const detail::Deadline& deadline, const char* step,
              const WaitLabel& label);

// Completes one of `requests[0..n)` and returns its index, or MPI_UNDEFINED when none is active. Timeout as
// wait_all.
int wait_any(MPI_Request* requests, int n, Requests kind, const detail::Deadline& deadline, const char* step,
             const WaitLabel& label);

// Throws BASP_ERROR_TIMEOUT: "timed out after <waited> ms (timeout ...) in <step> in <where>: still waiting for
// world ranks <pending>" (or "at least one rank of the group did not join" when `pending` is empty).
[[noreturn]] void fail_timeout(const detail::Deadline& deadline, const char* step, const std::string& where,
                               std::vector<int32_t> pending);

// Cancels the point-to-point requests still active, gives receives that a message already matched a short
// grace to finish landing, then releases what is still active (MPI_Request_free). Returns how many were
// released while active: their buffers may still be read (sends) or written (receives) by MPI later.
int drop_requests(MPI_Request* requests, int n);

}  // namespace basp::transport::mpi
