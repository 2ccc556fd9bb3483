// Cross-rank consistency of collective calls (docs/reliability.md). Before a collective call does anything that
// the other ranks must match, every rank describes the call as a CallRecord: which call, whether its own
// argument checks passed, and the fields every rank must agree on. The backend compares one 64-bit fingerprint
// of the records (cheap, one small reduction) and only on a difference gathers the records, so that every rank
// can name the field that differs, its values and the ranks holding each:
//   "num_heads[1]: rank 0..2 = 8, rank 3 = 4".
// Pure code, no I/O: the unit tests drive it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "basp/basp.h"
#include "plan/groups.h"

namespace basp::runtime {

enum class CallKind : int64_t {
  kCommCreate = 1,  // basp_comm_create_mpi (over the parent communicator)
  kPlanCreate = 2,  // basp_plan_create (over the group)
  kMemAlloc = 3,    // basp_mem_alloc (over the group)
  kMemFree = 4,     // basp_mem_free (over the group)
};

const char* call_name(CallKind kind);

// Fixed size and trivially copyable: it travels as bytes.
struct CallRecord {
  static constexpr int kMaxFields = 20;
  int64_t kind = 0;          // CallKind
  int64_t local_status = 0;  // BASP_SUCCESS, or the status this rank's own argument checks failed with
  int64_t readable = 0;      // 1: the fields below hold the rank's arguments; 0: its struct could not be read
  int64_t num_fields = 0;
  int64_t fields[kMaxFields] = {};
};
static_assert(std::is_trivially_copyable_v<CallRecord>, "CallRecord travels as bytes");

// `config` / `desc` is NULL when the caller's struct could not be read (NULL pointer, bad size, magic or
// version); `local_status` is the status the rank's own checks of its arguments gave (BASP_SUCCESS if none).
CallRecord describe_comm_create(const basp_comm_config_v1* config, basp_status_t local_status);
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
// joined by "; ". records[i] belongs to the rank called labels[i] in the message (a world or parent rank).
// Empty when the records agree.
std::string describe_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& labels);

// Throws BASP_ERROR_MISMATCH for a group whose ranks' records differ (records[i] from the rank labelled
// labels[i]; `where` names the group): "the ranks of <where> called <call> with different arguments: <fields>",
// or "... are not in the same collective call: ..." when the calls themselves differ. What every backend's
// check throws, so that the messages read the same.
[[noreturn]] void fail_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& labels,
                                const std::string& where, const CallRecord& mine);

// One all-gather of bytes over a group: `bytes` from every rank into `recv` (size * bytes, in position order).
// `step` names the round for a timeout message. Throws on failure or timeout.
using AllGatherBytes = std::function<void(const void* send, size_t bytes, void* recv, const std::string& step)>;

// The consistency check over a backend that offers only an all-gather (NCCL): the 8-byte fingerprints of the
// group's `size` ranks first, and only when they differ the records, then fail_mismatch(). Returns when every
// rank described the same call. Pure: the unit tests drive it with an emulated group.
void agree_by_allgather(const AllGatherBytes& allgather, int32_t size, const std::vector<int32_t>& labels,
                        const std::string& where, const CallRecord& mine);

// "0..2, 5, 7, 8": ranks in increasing order, runs of three or more compressed.
std::string compress_ranks(std::vector<int32_t> ranks);

// "group 1 (world ranks 4..7)".
std::string describe_group(const plan::GroupLayout& layout, int32_t group_index);

}  // namespace basp::runtime
