// Cross-rank consistency of collective calls (docs/reliability.md). Before a collective call does anything that
// the other ranks must match, every rank describes the call as a CallRecord: which call, whether its own
// argument checks passed, and the fields every rank must agree on. One all-gather of 64-bit fingerprints of the
// records tells every rank whether all agree; only on a difference are the records gathered, so that every rank
// can name the field that differs, its values and the ranks holding each:
//   "num_heads[1]: rank 0..2 = 8, rank 3 = 4".
// The same check serves every backend and every parent, over a transport::Bootstrap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "basp/basp.h"
#include "common/deadline.h"
#include "common/error.h"
#include "plan/groups.h"
#include "transport/bootstrap.h"

namespace basp::runtime {

enum class CallKind : int64_t {
  kCommCreateMpi = 1,   // basp_comm_create_mpi (over the parent communicator)
  kPlanCreate = 2,      // basp_plan_create (over the group)
  kMemAlloc = 3,        // basp_mem_alloc (over the group)
  kMemFree = 4,         // basp_mem_free (over the group)
  kCommCreateNccl = 5,  // basp_comm_create_nccl (over the parent NCCL communicator)
  kCommCreateOob = 6,   // basp_comm_create_oob (over the caller's out-of-band collectives)
};

const char* call_name(CallKind kind);

// Fixed size and trivially copyable: it travels as bytes.
struct CallRecord {
  static constexpr int kMaxFields = 35;
  int64_t kind = 0;          // CallKind
  int64_t local_status = 0;  // BASP_SUCCESS, or the status this rank's own argument checks failed with
  int64_t readable = 0;      // 1: the fields below hold the rank's arguments; 0: its struct could not be read
  int64_t num_fields = 0;
  int64_t fields[kMaxFields] = {};
};
static_assert(std::is_trivially_copyable_v<CallRecord>, "CallRecord travels as bytes");

bool is_comm_create(CallKind kind);

// `config` / `desc` is NULL when the caller's struct could not be read (NULL pointer, bad size, magic or
// version); `local_status` is the status the rank's own checks of its arguments gave (BASP_SUCCESS if none).
// `kind` is one of the comm creation calls.
CallRecord describe_comm_create(CallKind kind, const basp_comm_config_v1* config, basp_status_t local_status);
// The plan's fields plus the comm's (B, G, placement and a hash of the group membership), so that plans made
// from comms that differ are caught too.
CallRecord describe_plan_create(const basp_plan_desc_v1* desc, basp_status_t local_status,
                                const plan::GroupLayout& layout, basp_placement_t placement);
// A call whose arguments may differ between ranks (basp_mem_alloc: each rank sizes its own part): only the
// call itself and the outcome of the rank's own checks.
CallRecord describe_call(CallKind kind, basp_status_t local_status);
// basp_mem_free: whether the rank passed NULL (which does nothing, but only when every rank does).
CallRecord describe_mem_free(bool null_pointer);

uint64_t fingerprint(const CallRecord& record);

// What differs between the records, one clause per differing field ("field: rank 0..2 = v, rank 3 = w"),
// joined by "; ". records[i] belongs to the rank called members[i] in the message (a world or parent rank).
// Empty when the records agree.
std::string describe_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& members);

// Throws BASP_ERROR_MISMATCH for a group whose ranks' records differ (records[i] from the rank labelled
// members[i]; `where` names the group): "the ranks of <where> called <call> with different arguments: <fields>",
// or "... are not in the same collective call: ..." when the calls themselves differ. What every backend's
// check throws, so that the messages read the same.
[[noreturn]] void fail_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& members,
                                const std::string& where, const CallRecord& mine);

// One all-gather of bytes over a group: `bytes` from every rank into `recv` (size * bytes, in position order).
// `step` names the round for a timeout message. Throws on failure or timeout.
using AllGatherBytes = std::function<void(const void* send, size_t bytes, void* recv, const std::string& step)>;

// The consistency check:
//   round 1  the 8-byte fingerprints of the `size` ranks' records;
//   on a difference: the records, then fail_mismatch() on every rank;
//   round 2  (when the rank's own checks passed) a second all-gather, of the ranks' presence: a rank that arrives
//            after the others gave up on round 1 completes round 1 from their abandoned contributions, and round 2,
//            which they never join, makes it time out too, instead of letting it go on into a step that cannot
//            time out (MPI_Comm_split, ncclCommInitRank) and hang there.
// Returns when every rank described the same call. Pure: the unit tests drive it with an emulated group.
// On a mismatch, `others` (when given) says how the other ranks' own checks went.
enum class OthersChecks { kPassed, kFailedAlike, kMixed };
void agree_by_allgather(const AllGatherBytes& allgather, int32_t size, const std::vector<int32_t>& members,
                        const std::string& where, const CallRecord& mine, OthersChecks* others = nullptr);

// The consistency check over `bootstrap`, for a rank whose own argument checks may have failed (`local_error`
// set): it takes part all the same, so that the other ranks fail at once (BASP_ERROR_MISMATCH) instead of waiting
// for it until their timeout, and then throws its own error, noting what the others see. A rank's own error always
// wins; when every rank failed alike (a build without NCCL asked for NCCL comms) and the calls differ besides, each
// gets its own error with the difference noted. The one place where a local error meets the group's verdict.
void agree(transport::Bootstrap& bootstrap, const CallRecord& mine, const std::exception_ptr& local_error,
           const detail::Deadline& deadline);

using detail::status_of;

}  // namespace basp::runtime
