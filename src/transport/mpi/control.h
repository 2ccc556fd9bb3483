// The control messages of the MPI backend's exchanges (docs/design.md, docs/reliability.md): small messages that
// every rank of a group sends to every other around the data movement of a scatter or gather.
//
// All plans of a group send them on one communicator (the group's control communicator), each plan on its own
// tag, so that exchanges of different plans on different threads never take each other's messages. Every message
// names its exchange (plan, call number of that plan, operation), so that:
//   - an exchange that the group's ranks make as scatter on some and gather on others, or as different calls of one
//     plan, is a BASP_ERROR_MISMATCH naming both sides on every rank, as soon as the first round is in;
//   - an exchange that the ranks make on different plans is named the same way: a rank waiting for a peer's message
//     on its plan's tag finds the peer's message on another plan's tag instead (a "witness", read after a short
//     grace) and reports what the peer is doing. This is exact for a comm whose exchanges run one at a time on each
//     rank. Once any rank of the group ran two exchanges of the comm at once (threads), a message on another tag may
//     be another thread's, and a rank that never gets its peer's message times out instead (the flag travels with
//     every message, so every rank learns it).
// A mismatched exchange did not happen: every rank takes it back (its call number too) and the comm stays usable.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "common/deadline.h"
#include "common/direction.h"
#include "plan/exchange.h"
#include "transport/transport.h"

namespace basp::transport::mpi {

// The entry point of a direction as a control message carries it (its Direction value).
const char* direction_call(int32_t direction);

enum Round : int32_t {
  kArrive = 1,  // every exchange's first round: the exchange itself, and the addresses the path needs
  kDone = 2,    // the last round of the one-node paths: finished with the peers' memory
  kReady = 3,   // staged path only, when some ranks' tensors were in shared memory and others' not (docs/design.md)
};

constexpr uint32_t kFlagConcurrent = 1;  // the sender's comm ran two exchanges at once on one rank
constexpr uint32_t kFlagStaged = 2;      // staged path: the sender filled its staging region before round 1
constexpr uint32_t kFlagFailed = 4;      // the sender's own checks of its arguments failed (`status`): no exchange

struct ControlMessage {
  int64_t plan = -1;      // the plan's id in its comm
  int64_t call = -1;      // the plan's exchange count
  int32_t direction = 0;  // a Direction value (1 scatter, 2 gather)
  int32_t round = 0;
  uint32_t flags = 0;
  int32_t count = 0;                            // addresses used
  uint64_t address[2 * BASP_MAX_TENSORS] = {};  // inputs then outputs (round 1)
  uint64_t workspace = 0;                       // the sender's packed workspace, where its path has one (round 1)
  int32_t status = 0;                           // with kFlagFailed: the status of the sender's failed checks
  int32_t reserved = 0;
  int64_t tokens = -1;      // the tokens of the exchange (THD: T of the call)
  int32_t chunk_index = 0;  // the head chunk of the exchange (plan::HeadChunk; the whole: 0 of 1)
  int32_t chunk_count = 1;
  uint64_t documents = 0;  // THD: the fingerprint of the document boundaries (0: none set)
  uint64_t batch = 0;      // batch plans: the fingerprint of the batch description (0: not a batch plan)
};

// One per group transport: the control communicator, the concurrency flag and the rare messages a rank read on
// another plan's tag that turned out to be another thread's.
class ControlChannel {
 public:
  // Takes ownership of `comm` (a duplicate of the group communicator).
  ControlChannel(MPI_Comm comm, GroupSpec group);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  MPI_Comm comm() const { return comm_; }
  const GroupSpec& group() const { return group_; }
  // The tag of a plan; throws BASP_ERROR_UNSUPPORTED (on every rank alike) once the comm made more plans than the
  // MPI library's tag space has tags.
  int tag_of(int64_t plan_id) const;

  // An exchange starts or ends on this rank.
  void enter();
  void leave();
  bool concurrent() const { return concurrent_.load(std::memory_order_relaxed); }
  void set_concurrent() { concurrent_.store(true, std::memory_order_relaxed); }

  // Messages read on another plan's tag that belonged to another thread.
  void stash(int source, int tag, const ControlMessage& message);
  bool take_stashed(int source, int tag, ControlMessage* message);

 private:
  struct Stashed {
    int source;
    int tag;
    ControlMessage message;
  };
  MPI_Comm comm_;
  GroupSpec group_;
  int tag_ub_ = 32767;
  std::atomic<int32_t> inflight_{0};
  std::atomic<bool> concurrent_{false};
  std::atomic<int32_t> stashed_count_{0};
  std::mutex stash_mutex_;
  std::vector<Stashed> stash_;
};

// What a plan's control messages must match beyond the exchange itself (operation, call number, head chunk,
// tokens, documents), and where they travel.
//   plan tag           a plan of a group (`id`: its plan id): its own tag on the group's channel; a peer found on
//                      another plan's tag is read as a witness of a mismatch.
//   batch fingerprint  a batch plan (`id`: its batch id): the one tag of the comm's world channel, shared by every
//                      batch plan (their executes run one at a time); a peer's message of another batch plan, or of
//                      another batch description (`fingerprint`), is a mismatch.
struct MatchPolicy {
  enum class Kind { kPlanTag, kBatchFingerprint };
  Kind kind = Kind::kPlanTag;
  int64_t id = 0;
  uint64_t fingerprint = 0;  // batch fingerprint only; 0 otherwise
  static MatchPolicy plan_tag(int64_t plan_id) { return {Kind::kPlanTag, plan_id, 0}; }
  static MatchPolicy batch_fingerprint(const GroupInBatch& batch) {
    return {Kind::kBatchFingerprint, batch.batch_id, batch.fingerprint};
  }
  bool batch() const { return kind == Kind::kBatchFingerprint; }
};

// One per plan: its message buffers (allocated once), its call counter and the rounds of its exchanges.
//
// A batch plan's control (docs/batch.md) runs on the comm's world channel instead, with its own group.
class PlanControl {
 public:
  // `group`: the plan's group (members: world ranks, for messages); `ranks`: each position's rank on the channel.
  PlanControl(ControlChannel& channel, const GroupSpec& group, std::vector<int32_t> ranks, MatchPolicy match);
  ~PlanControl();
  PlanControl(const PlanControl&) = delete;
  PlanControl& operator=(const PlanControl&) = delete;

  // Around every exchange of `tokens` tokens per sequence (THD: of the stream) of head chunk `chunk` (both part of
  // what must match). rollback() before end(): the exchange did not happen (a mismatch).
  void begin(Direction direction, int64_t tokens, plan::HeadChunk chunk, uint64_t documents = 0);
  void rollback();
  void end();

  // Round 1: this rank's exchange and `count` addresses to every peer, every peer's in return (peer()). Throws
  // BASP_ERROR_MISMATCH naming every rank's exchange when they differ, BASP_ERROR_TIMEOUT naming the ranks waited
  // for. `step` names the round in a timeout.
  void arrive(const uint64_t* addresses, int32_t count, uint32_t flags, const detail::Deadline& deadline,
              const char* step, uint64_t workspace = 0);
  // Round 1 of an exchange this rank cannot make, because its own checks of its arguments failed with `status`:
  // its peers learn it from this rank's message and fail with BASP_ERROR_MISMATCH naming it, at once, instead of
  // waiting for the timeout. Returns when every peer's message is in; throws BASP_ERROR_TIMEOUT otherwise.
  void arrive_failed(basp_status_t status, const detail::Deadline& deadline, const char* step);
  // Rounds without payload (kDone, kReady).
  void round(Round round, const detail::Deadline& deadline, const char* step);
  const ControlMessage& peer(int32_t position) const { return recv_[static_cast<size_t>(position)]; }
  // Rounds of the current (or last) exchange.
  int32_t rounds() const { return rounds_; }

 private:
  enum class Got : uint8_t { kNothing, kOwn, kWitness };
  void send_all(Round round, uint32_t flags, const uint64_t* addresses, int32_t count, uint64_t workspace,
                int32_t status = 0);
  // send_all, receive_all, finish_sends: one round; sends that may still be pending when it fails stay pinned.
  void exchange_round(const detail::Deadline& deadline, const char* step);
  void receive_all(Round round, const detail::Deadline& deadline, const char* step);
  bool receive_from(int32_t j);
  bool look_for_witness(int32_t j);
  void finish_sends(const detail::Deadline& deadline, const char* step);
  void check_arrivals();
  void check_round(int32_t j, Round round) const;
  [[noreturn]] void report_mismatch() const;
  [[noreturn]] void report_timeout(const detail::Deadline& deadline, const char* step);

  int peer_rank(int32_t j) const { return ranks_[static_cast<size_t>(j)]; }

  ControlChannel& channel_;
  const GroupSpec group_;
  const std::vector<int32_t> ranks_;
  const MatchPolicy match_;
  const uint64_t batch_ = 0;  // match_.fingerprint
  const int64_t plan_id_;     // match_.id
  const int tag_;
  const int32_t k_;
  const int32_t me_;
  int64_t call_ = -1;
  Direction direction_ = Direction::kScatter;
  int64_t tokens_ = -1;
  plan::HeadChunk chunk_;
  uint64_t documents_ = 0;
  int32_t rounds_ = 0;
  Round round_ = kArrive;
  std::shared_ptr<ControlMessage> send_;  // shared: kept forever when a send could not be taken back
  std::vector<ControlMessage> recv_;
  std::vector<Got> got_;
  std::vector<MPI_Request> sends_;
  bool sends_pinned_ = false;  // a send MPI could not take back may still read send_: keep it forever
};

}  // namespace basp::transport::mpi
