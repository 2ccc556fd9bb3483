#include "transport/mpi/control.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/keep_forever.h"
#include "common/rank_list.h"
#include "common/status_name.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/mpi_wait.h"

namespace basp::transport::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// Spin first (a round completes within microseconds once every peer is in the exchange), then give the core away
// between polls: a rank waiting for a late peer should not starve the peer on a shared core.
constexpr int64_t kSpinMs = 10;
// How long a rank waits for its peer's message before it reads a message on another plan's tag as a witness of a
// mismatch: covers the first exchanges of a comm used from several threads, before any rank saw two at once.
constexpr int64_t kWitnessGraceMs = 1000;
constexpr int kMessageBytes = static_cast<int>(sizeof(ControlMessage));

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

int64_t witness_grace_ms(const detail::Deadline& deadline) {
  return deadline.never() ? kWitnessGraceMs : std::min(kWitnessGraceMs, deadline.timeout_ms() / 4);
}

}  // namespace

const char* direction_call(int32_t direction) {
  return direction == static_cast<int32_t>(Direction::kScatter)  ? "basp_scatter"
         : direction == static_cast<int32_t>(Direction::kGather) ? "basp_gather"
                                                                 : "an unknown operation";
}

ControlChannel::ControlChannel(MPI_Comm comm, GroupSpec group) : comm_(comm), group_(std::move(group)) {
  void* value = nullptr;
  int found = 0;
  BASP_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &value, &found));
  if (found && value != nullptr) tag_ub_ = *static_cast<int*>(value);
  stash_.reserve(64);
}

// Freeing a communicator with point-to-point operations still pending is safe in MPI (they complete on their own).
ControlChannel::~ControlChannel() {
  if (comm_ != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm_);
}

int ControlChannel::tag_of(int64_t plan_id) const {
  BASP_CHECK(plan_id >= 0 && plan_id <= tag_ub_, BASP_ERROR_UNSUPPORTED, "this comm made ", plan_id + 1,
             " plans, more than the MPI library's tags (MPI_TAG_UB = ", tag_ub_,
             ") can tell apart: create a new comm for more");
  return static_cast<int>(plan_id);
}

void ControlChannel::enter() {
  if (inflight_.fetch_add(1, std::memory_order_acq_rel) > 0) set_concurrent();
}

void ControlChannel::leave() { inflight_.fetch_sub(1, std::memory_order_acq_rel); }

void ControlChannel::stash(int source, int tag, const ControlMessage& message) {
  std::lock_guard<std::mutex> lock(stash_mutex_);
  BASP_CHECK(stash_.size() < stash_.capacity(), BASP_ERROR_INTERNAL, "more than ", stash_.capacity(),
             " control messages of other threads' exchanges are waiting in ", group_.where);
  stash_.push_back({source, tag, message});
  stashed_count_.fetch_add(1, std::memory_order_release);
}

bool ControlChannel::take_stashed(int source, int tag, ControlMessage* message) {
  if (stashed_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(stash_mutex_);
  for (auto it = stash_.begin(); it != stash_.end(); ++it) {
    if (it->source == source && it->tag == tag) {
      *message = it->message;
      stash_.erase(it);
      stashed_count_.fetch_sub(1, std::memory_order_release);
      return true;
    }
  }
  return false;
}

PlanControl::PlanControl(ControlChannel& channel, const GroupSpec& group, std::vector<int32_t> ranks, MatchPolicy match)
    : channel_(channel),
      group_(group),
      ranks_(std::move(ranks)),
      match_(match),
      batch_(match.fingerprint),
      plan_id_(match.id),
      tag_(match.batch() ? 0 : channel.tag_of(match.id)),
      k_(static_cast<int32_t>(group.members.size())),
      me_(group.position),
      send_(std::make_shared<ControlMessage>()),
      recv_(static_cast<size_t>(k_)),
      got_(static_cast<size_t>(k_), Got::kNothing),
      sends_(static_cast<size_t>(std::max(k_ - 1, 0)), MPI_REQUEST_NULL) {}

PlanControl::~PlanControl() {
  if (sends_pinned_) detail::keep_forever(send_);
}

void PlanControl::begin(Direction direction, int64_t tokens, plan::HeadChunk chunk, uint64_t documents) {
  ++call_;
  direction_ = direction;
  tokens_ = tokens;
  chunk_ = chunk;
  documents_ = documents;
  rounds_ = 0;
  channel_.enter();
}

void PlanControl::rollback() { --call_; }

void PlanControl::end() { channel_.leave(); }

void PlanControl::exchange_round(const detail::Deadline& deadline, const char* step) {
  try {
    receive_all(round_, deadline, step);
  } catch (...) {
    // A receive failed (a timeout, an MPI error): the sends may never complete; MPI may still read send_.
    if (drop_requests(sends_.data(), static_cast<int>(sends_.size())) > 0) sends_pinned_ = true;
    throw;
  }
  finish_sends(deadline, step);
}

void PlanControl::arrive(const uint64_t* addresses, int32_t count, uint32_t flags, const detail::Deadline& deadline,
                         const char* step, uint64_t workspace) {
  send_all(kArrive, flags, addresses, count, workspace);
  exchange_round(deadline, step);
  check_arrivals();
}

void PlanControl::arrive_failed(basp_status_t status, const detail::Deadline& deadline, const char* step) {
  send_all(kArrive, kFlagFailed, nullptr, 0, 0, status);
  exchange_round(deadline, step);
}

void PlanControl::round(Round round, const detail::Deadline& deadline, const char* step) {
  send_all(round, 0, nullptr, 0, 0);
  exchange_round(deadline, step);
  for (int32_t j = 0; j < k_; ++j) {
    if (j != me_) check_round(j, round);
  }
}

void PlanControl::send_all(Round round, uint32_t flags, const uint64_t* addresses, int32_t count, uint64_t workspace,
                           int32_t status) {
  ++rounds_;
  round_ = round;
  ControlMessage& m = *send_;
  m.plan = plan_id_;
  m.call = call_;
  m.direction = static_cast<int32_t>(direction_);
  m.round = round;
  m.flags = flags | (channel_.concurrent() ? kFlagConcurrent : 0u);
  m.count = count;
  m.workspace = workspace;
  m.status = status;
  m.tokens = tokens_;
  m.chunk_index = chunk_.index;
  m.chunk_count = chunk_.count;
  m.documents = documents_;
  m.batch = batch_;
  if (count > 0) std::memcpy(m.address, addresses, static_cast<size_t>(count) * sizeof(uint64_t));
  recv_[static_cast<size_t>(me_)] = m;
  for (int32_t i = 1; i < k_; ++i) {
    const int32_t j = (me_ + i) % k_;
    BASP_MPI_CHECK(
        MPI_Isend(send_.get(), kMessageBytes, MPI_BYTE, peer_rank(j), tag_, channel_.comm(), &sends_[i - 1]));
  }
}

bool PlanControl::receive_from(int32_t j) {
  ControlMessage& m = recv_[static_cast<size_t>(j)];
  if (!channel_.take_stashed(j, tag_, &m)) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    BASP_MPI_CHECK(MPI_Improbe(peer_rank(j), tag_, channel_.comm(), &flag, &message, MPI_STATUS_IGNORE));
    if (!flag) return false;
    BASP_MPI_CHECK(MPI_Mrecv(&m, kMessageBytes, MPI_BYTE, &message, MPI_STATUS_IGNORE));
  }
  if (m.flags & kFlagConcurrent) channel_.set_concurrent();
  return true;
}

// A message from peer j on another plan's tag, while this rank waits for j's message on its own: j is in another
// exchange. Read only where that is certain (no rank of the group ever ran two exchanges at once); a message that
// turns out to come from such a rank is left for the thread it belongs to.
bool PlanControl::look_for_witness(int32_t j) {
  int flag = 0;
  MPI_Status status;
  BASP_MPI_CHECK(MPI_Iprobe(j, MPI_ANY_TAG, channel_.comm(), &flag, &status));
  if (!flag || status.MPI_TAG == tag_) return false;
  MPI_Message message = MPI_MESSAGE_NULL;
  BASP_MPI_CHECK(MPI_Improbe(j, status.MPI_TAG, channel_.comm(), &flag, &message, MPI_STATUS_IGNORE));
  if (!flag) return false;  // another thread took it meanwhile
  ControlMessage w;
  BASP_MPI_CHECK(MPI_Mrecv(&w, kMessageBytes, MPI_BYTE, &message, MPI_STATUS_IGNORE));
  if (w.flags & kFlagConcurrent) channel_.set_concurrent();
  // Another thread of this rank (or of the sender) may be in that plan: the message is its, not a witness. Asked
  // after the receive too, since a thread may have entered the other plan meanwhile.
  if (channel_.concurrent()) {
    channel_.stash(j, status.MPI_TAG, w);
    return false;
  }
  recv_[static_cast<size_t>(j)] = w;
  return true;
}

void PlanControl::receive_all(Round round, const detail::Deadline& deadline, const char* step) {
  for (int32_t j = 0; j < k_; ++j) got_[static_cast<size_t>(j)] = j == me_ ? Got::kOwn : Got::kNothing;
  int32_t pending = k_ - 1;
  const auto t0 = Clock::now();
  const int64_t grace = witness_grace_ms(deadline);
  while (pending > 0) {
    const bool witnesses = !match_.batch() && round == kArrive && !channel_.concurrent() && ms_since(t0) >= grace;
    for (int32_t i = 1; i < k_; ++i) {
      const int32_t j = (me_ + k_ - i) % k_;
      Got& g = got_[static_cast<size_t>(j)];
      if (g != Got::kNothing) continue;
      if (receive_from(j)) {
        g = Got::kOwn;
      } else if (witnesses && look_for_witness(j)) {
        g = Got::kWitness;
      } else {
        continue;
      }
      --pending;
    }
    if (pending == 0) break;
    if (deadline.expired()) report_timeout(deadline, step);
    if (ms_since(t0) >= kSpinMs) sched_yield();
  }
}

void PlanControl::finish_sends(const detail::Deadline& deadline, const char* step) {
  WaitLabel label;
  label.where = &group_.where;
  label.members = &group_.members;
  try {
    wait_all(sends_.data(), static_cast<int>(sends_.size()), Requests::kPointToPoint, deadline, step, label);
  } catch (...) {
    if (drop_requests(sends_.data(), static_cast<int>(sends_.size())) > 0) sends_pinned_ = true;
    throw;
  }
}

void PlanControl::check_round(int32_t j, Round round) const {
  const ControlMessage& m = recv_[static_cast<size_t>(j)];
  BASP_CHECK(
      m.plan == plan_id_ && m.call == call_ && m.direction == static_cast<int32_t>(direction_) && m.round == round,
      BASP_ERROR_INTERNAL, "control round ", static_cast<int>(round), " of plan #", plan_id_, " (exchange #", call_,
      ") in ", group_.where, " got world rank ", group_.members[static_cast<size_t>(j)], "'s message of plan #", m.plan,
      " (exchange #", m.call, ", round ", m.round, "): the group is out of step");
}

void PlanControl::check_arrivals() {
  for (int32_t j = 0; j < k_; ++j) {
    const ControlMessage& m = recv_[static_cast<size_t>(j)];
    // On this plan's tag only this plan's first rounds can come first: anything else means the group is out of
    // step, and no verdict drawn from it could be trusted.
    if (match_.batch() && j != me_ && m.round == kArrive && (m.plan != plan_id_ || m.batch != batch_))
      report_mismatch();
    if (j != me_ && got_[static_cast<size_t>(j)] == Got::kOwn && (m.plan != plan_id_ || m.round != kArrive)) {
      BASP_CHECK(false, BASP_ERROR_INTERNAL, "the first control round of plan #", plan_id_, " in ", group_.where,
                 " got world rank ", group_.members[static_cast<size_t>(j)], "'s message of plan #", m.plan, " (round ",
                 m.round, "): the group is out of step");
    }
  }
  for (int32_t j = 0; j < k_; ++j) {
    const ControlMessage& m = recv_[static_cast<size_t>(j)];
    if (got_[static_cast<size_t>(j)] == Got::kWitness || m.call != call_ ||
        m.direction != static_cast<int32_t>(direction_) || m.tokens != tokens_ || m.chunk_index != chunk_.index ||
        m.chunk_count != chunk_.count || m.documents != documents_ || (m.flags & kFlagFailed)) {
      report_mismatch();
    }
  }
}

void PlanControl::report_mismatch() const {
  bool same_exchange = true;  // every rank in this plan's exchange #call_: only the operations differ
  for (int32_t j = 0; j < k_; ++j) {
    const ControlMessage& m = recv_[static_cast<size_t>(j)];
    same_exchange = same_exchange && got_[static_cast<size_t>(j)] == Got::kOwn && m.call == call_ &&
                    m.plan == plan_id_ && m.batch == batch_;
  }
  bool failed = false;  // some rank's own argument checks failed: that, not the operations, is the story
  for (int32_t j = 0; j < k_; ++j) failed = failed || (recv_[static_cast<size_t>(j)].flags & kFlagFailed);
  bool tokens_differ = false;  // a THD exchange whose ranks passed different token counts
  for (int32_t j = 0; j < k_; ++j) tokens_differ = tokens_differ || recv_[static_cast<size_t>(j)].tokens != tokens_;
  bool chunks_differ = false;  // ... or different head chunks
  for (int32_t j = 0; j < k_; ++j) {
    const ControlMessage& m = recv_[static_cast<size_t>(j)];
    chunks_differ = chunks_differ || m.chunk_index != chunk_.index || m.chunk_count != chunk_.count;
  }
  bool documents_differ = false;  // ... or different document boundaries (basp_plan_set_documents)
  for (int32_t j = 0; j < k_; ++j) {
    documents_differ = documents_differ || recv_[static_cast<size_t>(j)].documents != documents_;
  }
  bool batch_differs = false;  // batch plans made from different batch descriptions
  for (int32_t j = 0; j < k_; ++j) batch_differs = batch_differs || recv_[static_cast<size_t>(j)].batch != batch_;
  auto describe = [&](const ControlMessage& m) {
    std::string out = direction_call(m.direction);
    if (batch_differs) {
      char fp[32];
      std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(m.batch));
      out += " of a batch described as " + std::string(fp);
    }
    if (tokens_differ) out += " of " + std::to_string(m.tokens) + " tokens";
    if (chunks_differ) {
      out += m.chunk_count == 1
                 ? std::string(" of every head")
                 : " of head chunk " + std::to_string(m.chunk_index) + " of " + std::to_string(m.chunk_count);
    }
    if (documents_differ) {
      char fp[32];
      std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(m.documents));
      out += m.documents == 0 ? std::string(" without document boundaries")
                              : " with document boundaries " + std::string(fp);
    }
    if (!same_exchange) {
      out += std::string(match_.batch() ? " of batch plan #" : " of plan #") + std::to_string(m.plan) + " (exchange #" +
             std::to_string(m.call) + ")";
    }
    if (m.flags & kFlagFailed)
      out += " whose argument checks failed with " + std::string(detail::status_name(m.status));
    return out;
  };
  std::vector<std::pair<std::string, std::vector<int32_t>>> sides;  // in order of the first rank
  for (int32_t j = 0; j < k_; ++j) {
    const std::string what = describe(recv_[static_cast<size_t>(j)]);
    const int32_t world = group_.members[static_cast<size_t>(j)];
    auto it = std::find_if(sides.begin(), sides.end(), [&](const auto& s) { return s.first == what; });
    if (it == sides.end()) {
      sides.push_back({what, {world}});
    } else {
      it->second.push_back(world);
    }
  }
  std::string detail;
  for (const auto& [what, ranks] : sides) {
    detail += std::string(detail.empty() ? "" : ", ") + "rank " + detail::compress_ranks(ranks) + " = " + what;
  }
  const char* what = failed          ? " could not all make the exchange: "
                     : same_exchange ? " are not in the same operation of this plan: "
                                     : " are not in the same exchange: ";
  detail::fail(BASP_ERROR_MISMATCH, "the ranks of ", group_.where, what, detail,
               same_exchange    ? ""
               : match_.batch() ? " (batch plans are numbered in the order each rank made them: every rank must make "
                                  "every batch plan of the comm, from the same description)"
                                : " (plans are numbered in the order the comm made them)");
}

void PlanControl::report_timeout(const detail::Deadline& deadline, const char* step) {
  std::vector<int32_t> pending;
  for (int32_t j = 0; j < k_; ++j) {
    if (got_[static_cast<size_t>(j)] == Got::kNothing) pending.push_back(group_.members[static_cast<size_t>(j)]);
  }
  fail_timeout(deadline, step, group_.where, std::move(pending));  // exchange_round pins the sends
}

}  // namespace basp::transport::mpi
