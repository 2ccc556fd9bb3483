#include "transport/mpi/mpi_wait.h"

#include <sched.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/rank_list.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {
namespace {

// Spin first (an exchange usually completes within microseconds of the last peer arriving), then give the core
// away between polls: a rank waiting seconds for a late peer should not starve the peer on a shared core.
constexpr int64_t kSpinMs = 10;
// After MPI_Cancel, how long a receive that a message already matched gets to finish landing (its sender is
// alive and sending) before it is released anyway.
constexpr int64_t kCancelGraceMs = 100;

void relax(const detail::Deadline& deadline, detail::Deadline::Clock::time_point now) {
  if (deadline.elapsed_ms(now) >= kSpinMs) sched_yield();
}

[[noreturn]] void time_out(MPI_Request* requests, int n, Requests kind, const detail::Deadline& deadline,
                           const char* step, const WaitLabel& label) {
  // Which peers are still pending: only point-to-point requests know theirs.
  std::vector<int32_t> pending_ranks;
  if (kind == Requests::kPointToPoint && label.peer_of != nullptr && label.members != nullptr) {
    for (int i = 0; i < n; ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Request_get_status(requests[i], &done, MPI_STATUS_IGNORE);
      const int32_t peer = label.peer_of[i];
      if (!done && peer >= 0 && static_cast<size_t>(peer) < label.members->size()) {
        pending_ranks.push_back((*label.members)[static_cast<size_t>(peer)]);
      }
    }
  }
  // Point-to-point requests stay for the caller's drop_requests(), which knows what their buffers are.
  if (kind == Requests::kCollective) {
    for (int i = 0; i < n; ++i) requests[i] = MPI_REQUEST_NULL;  // abandoned: see mpi_wait.h
  }
  fail_timeout(deadline, step, label.where ? *label.where : std::string("the group"), std::move(pending_ranks));
}

}  // namespace

void fail_timeout(const detail::Deadline& deadline, const char* step, const std::string& where,
                  std::vector<int32_t> pending) {
  const int64_t waited = deadline.elapsed_ms();
  std::sort(pending.begin(), pending.end());
  pending.erase(std::unique(pending.begin(), pending.end()), pending.end());
  const std::string who = pending.empty()
                              ? std::string("at least one rank of the group did not join")
                              : "still waiting for world rank" + std::string(pending.size() > 1 ? "s " : " ") +
                                    detail::compress_ranks(pending);
  detail::fail(BASP_ERROR_TIMEOUT, "timed out after ", waited, " ms (timeout ", deadline.timeout_ms(),
               " ms: config->timeout_ms or BASP_TIMEOUT_MS) in ", step, " in ", where, ": ", who,
               "; the comm is broken from now on");
}

int drop_requests(MPI_Request* requests, int n) {
  int active = 0;
  for (int i = 0; i < n; ++i) {
    if (requests[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&requests[i]);
      ++active;
    }
  }
  if (active == 0) return 0;
  // Cancelled receives complete at once; matched ones finish landing; sends MPI cannot cancel stay active.
  const detail::Deadline grace(kCancelGraceMs);
  int done = 0;
  do {
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
  } while (!done && !grace.expired());
  int released = 0;
  for (int i = 0; i < n; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    int finished = 0;
    MPI_Test(&requests[i], &finished, MPI_STATUS_IGNORE);
    if (!finished) {
      MPI_Request_free(&requests[i]);
      ++released;
    }
    requests[i] = MPI_REQUEST_NULL;
  }
  return released;
}

void wait_all(MPI_Request* requests, int n, Requests kind, const detail::Deadline& deadline, const char* step,
              const WaitLabel& label) {
  for (;;) {
    int done = 0;
    BASP_MPI_CHECK(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    const auto now = detail::Deadline::Clock::now();
    if (deadline.expired(now)) time_out(requests, n, kind, deadline, step, label);
    relax(deadline, now);
  }
}

int wait_any(MPI_Request* requests, int n, Requests kind, const detail::Deadline& deadline, const char* step,
             const WaitLabel& label) {
  for (;;) {
    int index = MPI_UNDEFINED;
    int done = 0;
    BASP_MPI_CHECK(MPI_Testany(n, requests, &index, &done, MPI_STATUS_IGNORE));
    if (done) return index;
    const auto now = detail::Deadline::Clock::now();
    if (deadline.expired(now)) time_out(requests, n, kind, deadline, step, label);
    relax(deadline, now);
  }
}

}  // namespace basp::transport::mpi
