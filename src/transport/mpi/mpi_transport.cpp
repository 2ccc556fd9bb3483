// MPI backend. One exchange = every chunk of every tensor of the plan posted as non-blocking point-to-point
// operations on the plan's private communicator and completed together: Q, K and V travel in one exchange.
//
// The data is packed at most once per direction (see layout/geometry.h):
//   scatter: rows for peer j are strided on the send side and contiguous blocks on the receive side, so the
//            sender packs each peer's chunk into the workspace and the receiver receives straight into the
//            output through a vector datatype (b_loc blocks, BSHD) or a contiguous one (SBHD);
//   gather:  the mirror image: the sender sends straight from its input through the same datatype, the
//            receiver lands each chunk in the workspace and unpacks it as soon as it arrives.
// The rank's own slice never touches MPI: it is copied directly from input to output.
//
// When every rank of the group shares one node (MPI_COMM_TYPE_SHARED), the plan takes one of two intra-node
// paths instead, chosen collectively at plan creation:
//   staged  (default on one node): the plan owns a staging region per rank in shared memory (memfd, mapped by
//           every rank of the group); a rank writes what its peers need into its own region, then copies its
//           share out of every peer's region: two user-space copies per byte, row-major over the whole group
//           (layout::pack_seq_rows_group), any row size, no system call per row (run_staged);
//   direct  (when the mapping is refused, or forced): cross-memory attach, one system call per peer and tile of
//           rows (scatter: process_vm_writev from my input rows into the peer's output; gather:
//           process_vm_readv from the peer's input into my output rows), one copy per byte by the kernel, which
//           pins every page it touches and pays per row.
// BASP_MPI_TRANSPORT=p2p|direct|staged forces one path (auto: staged, else direct, else point-to-point).
//
// Every wait is bounded by the comm's timeout (mpi_wait.h, docs/reliability.md). The direct path runs three small
// point-to-point rounds, so that a rank never exposes its tensors to a peer that is not in the same call:
//   arrive     each rank tells every peer which operation it is in; nothing of its memory is published yet, so
//              a rank that gives up here (a peer never came) leaves nothing a late peer could write into;
//   addresses  sent only after every peer arrived: the head-sharded tensors' addresses;
//   done       sent to peer j once this rank finished with j's tensor; a rank returns only when every peer said
//              done, so nobody reuses a tensor a peer still touches.
// A late peer that finds the others gone completes "arrive" from their stale messages and then waits for
// addresses nobody sends: it times out too, having written nothing.
//
// Fastest of all: when every head-sharded tensor of the exchange lives in memory from basp_mem_alloc (mapped
// by every rank of the group, see shared_memory.h), the rows move with plain memcpy into (scatter) or out of
// (gather) the peers' tensors: one user-space copy, no system call per row, any row size.
#include "transport/mpi/mpi_transport.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "layout/host_copy.h"
#include "runtime/consistency.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/keep_forever.h"
#include "transport/mpi/mpi_collectives.h"
#include "transport/mpi/mpi_locality.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/mpi_wait.h"
#include "transport/mpi/shared_memory.h"

namespace basp::transport::mpi {
namespace {

constexpr int kScatterTagBase = 0;
constexpr int kGatherTagBase = BASP_MAX_TENSORS;
constexpr int kArriveTag = 2 * BASP_MAX_TENSORS;  // direct path, round 1: the operation
constexpr int kAddressTag = kArriveTag + 1;       // round 2: the head-sharded tensors' addresses
constexpr int kDoneTag = kArriveTag + 2;          // round 3: finished with the receiver's tensors
constexpr int64_t kDirectMinRowBytes = 1024;
// Shared-memory path: tensors at least this large are written with non-temporal stores (they do not fit in the
// cache anyway, and streaming saves reading every destination line first).
constexpr int64_t kStreamingMinBytes = int64_t{4} << 20;
// Cross-memory-attach path: bytes of the sequence-sharded tensor per tile (see copy_cma).
constexpr int64_t kCmaTileBytes = int64_t{512} << 10;
constexpr int64_t kWantP2P = 0;  // BASP_MPI_TRANSPORT values, ordered for the group's agreement
constexpr int64_t kWantAuto = 1;
constexpr int64_t kWantDirect = 2;
constexpr int64_t kWantStaged = 3;
constexpr int32_t kOpScatter = 1;
constexpr int32_t kOpGather = 2;
// Send buffers of the direct path's first and last rounds: static, so that they outlive any request.
constexpr int32_t kOpCodes[3] = {0, kOpScatter, kOpGather};

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

int to_int(int64_t v, const char* what) {
  BASP_CHECK_ARG(v >= 0 && v <= INT_MAX, what, " (", v, ") exceeds the MPI count limit (", INT_MAX, ")");
  return static_cast<int>(v);
}

const char* op_name(int32_t op) { return op == kOpScatter ? "basp_scatter" : op == kOpGather ? "basp_gather" : "?"; }

// A communicator that is leaked instead of freed once a collective on it was abandoned (mpi_collectives.h):
// Open MPI would otherwise progress the abandoned operation on a freed communicator and crash.
struct GuardedComm {
  OwnedComm comm;
  bool abandoned = false;
  GuardedComm() = default;
  explicit GuardedComm(OwnedComm c) : comm(std::move(c)) {}
  GuardedComm(const GuardedComm&) = delete;
  GuardedComm& operator=(const GuardedComm&) = delete;
  ~GuardedComm() {
    if (abandoned) comm.leak();
  }
  MPI_Comm get() const { return comm.get(); }
};

// What the executors of one group share: who the group is, for messages, and the comm's timeout.
struct GroupContext {
  int32_t position = 0;
  std::vector<int32_t> members;  // world rank of each position
  std::string where;             // "group 0 (world ranks 0..3)"
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;
};

// The collectives' view of a group communicator: who its ranks are (for messages) and where to record an
// abandoned collective.
CollectiveScope group_scope(GuardedComm& comm, const GroupContext& context) {
  CollectiveScope s;
  s.comm = comm.get();
  s.labels = context.members;
  s.where = context.where;
  s.abandoned = &comm.abandoned;
  return s;
}

class MpiExecutor final : public PlanExecutor {
 public:
  MpiExecutor(MPI_Comm group, const plan::ExchangePlan& plan, std::shared_ptr<SharedMemory> shared,
              std::shared_ptr<const GroupContext> context)
      : plan_(plan), shared_(std::move(shared)), context_(std::move(context)) {
    comm_.comm = dup_with_errors_return(group);
    const int32_t n = plan_.num_tensors();
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      MPI_Datatype row = MPI_DATATYPE_NULL;
      BASP_MPI_CHECK(MPI_Type_contiguous(to_int(g.row_bytes(), "row bytes"), MPI_BYTE, &row));
      OwnedType row_owned(row);
      BASP_MPI_CHECK(MPI_Type_commit(&row));
      MPI_Datatype block = MPI_DATATYPE_NULL;
      BASP_MPI_CHECK(MPI_Type_vector(to_int(g.num_blocks(), "blocks"), to_int(g.block_rows(), "block rows"),
                                     to_int(g.block_stride_rows(), "block stride"), row, &block));
      OwnedType block_owned(block);
      BASP_MPI_CHECK(MPI_Type_commit(&block));
      row_counts_.push_back(to_int(g.rows(), "rows per chunk"));
      row_types_.push_back(std::move(row_owned));
      head_types_.push_back(std::move(block_owned));
    }
    const auto k = static_cast<size_t>(plan_.group_size);
    requests_.assign(2 * static_cast<size_t>(n) * (k - 1), MPI_REQUEST_NULL);
    request_peer_.assign(requests_.size(), -1);
    control_.assign(2 * (k - 1), MPI_REQUEST_NULL);
    control_peer_.assign(control_.size(), -1);
    arrived_.assign(k, 0);
    my_ptrs_.assign(static_cast<size_t>(n), 0);
    peer_ptrs_.assign(static_cast<size_t>(n) * k, 0);
    shared_heads_.assign(k, nullptr);
    staged_wire_.assign(k, nullptr);
    if (plan_.group_size > 1) choose_path();
    if (!direct_ && !staged_ && plan_.workspace_bytes > 0) {
      const auto bytes = static_cast<size_t>((plan_.workspace_bytes + 63) / 64 * 64);
      workspace_.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
      if (!workspace_) detail::fail(BASP_ERROR_OUT_OF_MEMORY, "workspace of ", bytes, " bytes");
      std::memset(workspace_.get(), 0, bytes);  // fault the pages in now, not in the first execute
    }
  }

  ~MpiExecutor() override {
    // Nothing is pending after a normal return, and a failed exchange dropped its requests already. Buffers that
    // a released request may still touch (a send MPI could not cancel, waiting for a late peer) are kept forever:
    // freeing them would let MPI read freed memory when that peer arrives.
    if (workspace_pinned_) keep_forever(std::shared_ptr<std::byte>(workspace_.release(), FreeDeleter()));
    if (control_pinned_) {
      keep_forever(std::make_shared<std::vector<int32_t>>(std::move(arrived_)));
      keep_forever(std::make_shared<std::vector<uint64_t>>(std::move(my_ptrs_)));
      keep_forever(std::make_shared<std::vector<uint64_t>>(std::move(peer_ptrs_)));
    }
  }

  int32_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }

  int64_t workspace_bytes() const override {
    if (staged_) return staging_bytes_;
    return direct_ ? 0 : plan_.workspace_bytes;
  }

  void scatter(const void* const* inputs, void* const* outputs, void*) override {
    const detail::Deadline deadline(context_->timeout_ms);
    if (try_direct(inputs, outputs, kOpScatter, deadline)) return;
    last_path_ = plan_.group_size == 1 ? BASP_PATH_LOCAL : BASP_PATH_P2P;
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    MPI_Comm comm = comm_.get();
    size_t nreq = 0;
    try {
      // Receives first, from the peers in the order they will send to us.
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me - i + k) % k;
        for (int32_t t = 0; t < n; ++t) {
          auto* out = static_cast<std::byte*>(outputs[t]) + plan_.tensors[t].head_row_offset(0, j);
          request_peer_[nreq] = j;
          BASP_MPI_CHECK(MPI_Irecv(out, 1, head_types_[t].get(), j, kScatterTagBase + t, comm, &requests_[nreq++]));
        }
      }
      // Pack each peer's chunk and send it at once, so packing the next overlaps the transfer of this one.
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;
        for (int32_t t = 0; t < n; ++t) {
          std::byte* chunk = workspace_.get() + plan_.workspace_offset(t, j);
          layout::pack_seq_rows(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]), chunk, j);
          request_peer_[nreq] = j;
          BASP_MPI_CHECK(
              MPI_Isend(chunk, row_counts_[t], row_types_[t].get(), j, kScatterTagBase + t, comm, &requests_[nreq++]));
        }
      }
      for (int32_t t = 0; t < n; ++t) {
        layout::copy_seq_to_head(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]),
                                 static_cast<std::byte*>(outputs[t]), me);
      }
      wait_all(requests_.data(), static_cast<int>(nreq), Requests::kPointToPoint, deadline,
               "the point-to-point exchange of basp_scatter", label(request_peer_.data()));
    } catch (...) {
      if (drop_requests(requests_.data(), static_cast<int>(nreq)) > 0) workspace_pinned_ = true;
      throw;
    }
  }

  void gather(const void* const* inputs, void* const* outputs, void*) override {
    const detail::Deadline deadline(context_->timeout_ms);
    if (try_direct(inputs, outputs, kOpGather, deadline)) return;
    last_path_ = plan_.group_size == 1 ? BASP_PATH_LOCAL : BASP_PATH_P2P;
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    MPI_Comm comm = comm_.get();
    const size_t nrecv = static_cast<size_t>(n * (k - 1));
    size_t nreq = 0;
    try {
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me - i + k) % k;
        for (int32_t t = 0; t < n; ++t) {
          std::byte* chunk = workspace_.get() + plan_.workspace_offset(t, j);
          request_peer_[nreq] = j;
          BASP_MPI_CHECK(
              MPI_Irecv(chunk, row_counts_[t], row_types_[t].get(), j, kGatherTagBase + t, comm, &requests_[nreq++]));
        }
      }
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;
        for (int32_t t = 0; t < n; ++t) {
          const auto* in = static_cast<const std::byte*>(inputs[t]) + plan_.tensors[t].head_row_offset(0, j);
          request_peer_[nreq] = j;
          BASP_MPI_CHECK(MPI_Isend(in, 1, head_types_[t].get(), j, kGatherTagBase + t, comm, &requests_[nreq++]));
        }
      }
      for (int32_t t = 0; t < n; ++t) {
        layout::copy_head_to_seq(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]),
                                 static_cast<std::byte*>(outputs[t]), me);
      }
      // Unpack each chunk as soon as it lands.
      for (size_t done = 0; done < nrecv; ++done) {
        const int index = wait_any(requests_.data(), static_cast<int>(nrecv), Requests::kPointToPoint, deadline,
                                   "the point-to-point exchange of basp_gather", label(request_peer_.data()));
        if (index == MPI_UNDEFINED) break;
        const int32_t i = index / n + 1;
        const int32_t t = index % n;
        const int32_t j = (me - i + k) % k;
        layout::unpack_seq_rows(plan_.tensors[t], workspace_.get() + plan_.workspace_offset(t, j),
                                static_cast<std::byte*>(outputs[t]), j);
      }
      wait_all(requests_.data() + nrecv, static_cast<int>(nreq - nrecv), Requests::kPointToPoint, deadline,
               "the point-to-point exchange of basp_gather", label(request_peer_.data() + nrecv));
    } catch (...) {
      if (drop_requests(requests_.data(), static_cast<int>(nreq)) > 0) workspace_pinned_ = true;
      throw;
    }
  }

 private:
  WaitLabel label(const int32_t* peer_of) const {
    WaitLabel l;
    l.where = &context_->where;
    l.members = &context_->members;
    l.peer_of = peer_of;
    return l;
  }

  CollectiveScope scope() { return group_scope(comm_, *context_); }

  // Collective: picks the plan's path for the whole group (every rank reaches the same verdict) and sets up
  // what it needs. One node: the staging area (shared memory, any row size), else cross-memory attach, else
  // point-to-point; BASP_MPI_TRANSPORT=p2p|direct|staged forces one.
  void choose_path() {
    const char* env = std::getenv("BASP_MPI_TRANSPORT");
    const std::string mode = env ? env : "auto";
    const detail::Deadline deadline(context_->timeout_ms);
    // A bad value on one rank still takes part below (as "p2p"), so its peers do not wait for it.
    const bool known = mode == "auto" || mode == "p2p" || mode == "direct" || mode == "staged";
    const CollectiveScope group = scope();
    // Every rank must take the same path, whatever its environment says.
    const int64_t want = mode == "auto"     ? kWantAuto
                         : mode == "direct" ? kWantDirect
                         : mode == "staged" ? kWantStaged
                                            : kWantP2P;
    int64_t wants[3] = {want, -want, known ? 0 : -1};
    allreduce_min(group, wants, 3, "the choice of the MPI path at basp_plan_create", deadline);
    BASP_CHECK_ARG(known, "BASP_MPI_TRANSPORT (", mode, ") must be auto, p2p, direct or staged");
    BASP_CHECK_ARG(wants[2] == 0, "BASP_MPI_TRANSPORT is not auto, p2p, direct or staged on another rank of ",
                   context_->where);
    const int64_t min_want = wants[0];
    const int64_t max_want = -wants[1];
    if (min_want == kWantP2P) return;  // p2p anywhere wins: every rank can do it
    BASP_CHECK_ARG(min_want == max_want || min_want == kWantAuto, "BASP_MPI_TRANSPORT is direct on some ranks of ",
                   context_->where, " and staged on others: set the same value on every rank");
    const int64_t forced = max_want;  // kWantAuto when nobody forced a path
    // Same node? (Blocking, but every rank is inside this call since the consistency check.)
    MPI_Comm shared = MPI_COMM_NULL;
    BASP_MPI_CHECK(MPI_Comm_split_type(comm_.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
    OwnedComm shared_owned(shared);
    int shared_size = 0;
    BASP_MPI_CHECK(MPI_Comm_size(shared, &shared_size));
    const bool one_node = shared_size == plan_.group_size;  // the same answer on every rank of the group
    if (forced != kWantDirect) {
      if (one_node && set_up_staging(deadline)) return;
      BASP_CHECK(forced != kWantStaged, BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=staged was requested but ",
                 one_node ? "the group's ranks cannot map each other's memory (memfd through /proc)"
                          : "the group spans several nodes");
    }
    direct_ = probe_cma(group, one_node, forced == kWantDirect, deadline);
  }

  // Collective: the staging area, one shared-memory region per rank holding every peer's packed chunk of every
  // tensor. True when every rank maps every other one's region.
  bool set_up_staging(const detail::Deadline& deadline) {
    const int32_t k = plan_.group_size;
    const int32_t n = plan_.num_tensors();
    int64_t bytes = 0;
    for (int32_t t = 0; t < n; ++t) {
      staged_offset_.push_back(bytes);
      bytes += (plan_.tensors[t].tensor_bytes() + 63) / 64 * 64;
    }
    bool shared = false;
    const CollectiveScope group = scope();
    void* mine =
        staging_.allocate(group, plan_.position, static_cast<size_t>(std::max<int64_t>(bytes, 64)), &shared, deadline);
    if (!shared) {
      staging_.release(group, plan_.position, mine, deadline);
      staged_offset_.clear();
      return false;
    }
    staged_base_.assign(static_cast<size_t>(k), nullptr);
    for (int32_t j = 0; j < k; ++j) {
      staged_base_[static_cast<size_t>(j)] =
          j == plan_.position ? static_cast<std::byte*>(mine) : staging_.first_region_of(j);
    }
    // Fault every mapping in now, not in the first execute (zero pages of a fresh memfd are shared).
    std::memset(mine, 0, static_cast<size_t>(bytes));
    staging_bytes_ = bytes;
    staged_ = true;
    return true;
  }

  // Collective: true when every rank of the group can read every other one's memory with cross-memory attach.
  bool probe_cma(const CollectiveScope& group, bool one_node, bool forced, const detail::Deadline& deadline) {
    // The kernel pays per local range: below about 1 KiB rows, pack + send moves bytes faster than one range
    // per row (measured on the 2-core CI machine: 256-byte rows 4.3x a bare all-to-all direct vs 2.5x packed;
    // 1 KiB rows 1.7x vs 2.0x). A forced "direct" ignores this.
    int64_t min_row = INT64_MAX;
    for (const auto& g : plan_.tensors) min_row = std::min(min_row, g.row_bytes());
    if (!forced && min_row < kDirectMinRowBytes) return false;
    // Can every rank read every other rank's memory? Probe a known value through each peer.
    const int k = plan_.group_size;
    const int me = plan_.position;
    static thread_local uint64_t probe_value = 0;
    probe_value = 0xBA5Bull << 32 | static_cast<uint64_t>(me);
    struct Endpoint {
      int64_t pid;
      uint64_t address;
    } mine{static_cast<int64_t>(getpid()), reinterpret_cast<uint64_t>(&probe_value)};
    std::vector<Endpoint> all(static_cast<size_t>(k));
    allgather_bytes(group, &mine, sizeof(Endpoint), all.data(), "the exchange of process ids at basp_plan_create",
                    deadline);
    int64_t ok = one_node ? 1 : 0;
    for (int j = 0; j < k && ok; ++j) {
      if (j != me)
        ok = cma_probe(static_cast<pid_t>(all[j].pid), all[j].address, 0xBA5Bull << 32 | static_cast<uint64_t>(j));
    }
    allreduce_min(group, &ok, 1, "the cross-memory-attach probe at basp_plan_create", deadline);
    BASP_CHECK(ok || !forced, BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=direct was requested but ",
               !one_node ? "the group spans several nodes"
                         : "cross-memory attach (process_vm_readv) is not permitted between the group's ranks");
    for (const Endpoint& e : all) pids_.push_back(static_cast<pid_t>(e.pid));
    return ok == 1;
  }

  // Posts one zero-or-small message to and from every peer on `tag` and waits for all of them. `send(j)` and
  // `recv(j)` give the buffers; `bytes` their size.
  template <typename SendBuf, typename RecvBuf>
  void round(int tag, int bytes, SendBuf send, RecvBuf recv, const detail::Deadline& deadline, const char* step) {
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    MPI_Comm comm = comm_.get();
    int nreq = 0;
    try {
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me - i + k) % k;
        control_peer_[nreq] = j;
        BASP_MPI_CHECK(MPI_Irecv(recv(j), bytes, MPI_BYTE, j, tag, comm, &control_[nreq++]));
      }
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;
        control_peer_[nreq] = j;
        BASP_MPI_CHECK(MPI_Isend(send(j), bytes, MPI_BYTE, j, tag, comm, &control_[nreq++]));
      }
      wait_all(control_.data(), nreq, Requests::kPointToPoint, deadline, step, label(control_peer_.data()));
    } catch (...) {
      if (drop_requests(control_.data(), nreq) > 0) control_pinned_ = true;
      throw;
    }
  }

  // The direct paths for both directions; the remote side is always the peer's head-sharded tensor.
  // scatter: I move the rows of peer j's head slice from my input into j's output;
  // gather:  I move the rows of my tokens from j's input into my output.
  // Returns false (having moved nothing) when neither direct path applies and point-to-point must run.
  bool try_direct(const void* const* inputs, void* const* outputs, int32_t op, const detail::Deadline& deadline) {
    const int32_t k = plan_.group_size;
    if (k == 1 || !(direct_ || staged_ || shared_->has_shared_regions())) return false;
    const bool scatter = op == kOpScatter;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    if (staged_ && !shared_->has_shared_regions()) {
      run_staged(inputs, outputs, op, deadline);
      return true;
    }
    // Round 1: every peer is in this call, and in the same operation.
    arrive(op, deadline,
           scatter ? "the arrival of the group's ranks at basp_scatter (direct path)"
                   : "the arrival of the group's ranks at basp_gather (direct path)");
    // Round 2: the head-sharded tensors' addresses. Every rank then holds the same table.
    for (int32_t t = 0; t < n; ++t) {
      my_ptrs_[t] = reinterpret_cast<uint64_t>(scatter ? static_cast<const void*>(outputs[t]) : inputs[t]);
      peer_ptrs_[static_cast<size_t>(me * n + t)] = my_ptrs_[t];
    }
    round(
        kAddressTag, static_cast<int>(n * sizeof(uint64_t)), [&](int32_t) { return my_ptrs_.data(); },
        [&](int32_t j) { return &peer_ptrs_[static_cast<size_t>(j * n)]; }, deadline,
        "the exchange of tensor addresses (direct path)");
    // Every rank holds the same table of shared regions, so every rank reaches the same verdict here.
    bool all_shared = true;
    for (int32_t j = 0; j < k && all_shared; ++j) {
      for (int32_t t = 0; t < n && all_shared; ++t) {
        all_shared = shared_->translate(j, peer_ptrs_[static_cast<size_t>(j * n + t)],
                                        static_cast<uint64_t>(plan_.tensors[t].tensor_bytes())) != nullptr;
      }
    }
    if (!all_shared && staged_) {
      // The tensors are not all in basp_mem_alloc memory after all: stage them (every rank alike; the address
      // round above changed nothing).
      run_staged(inputs, outputs, op, deadline);
      return true;
    }
    if (!all_shared && !direct_) {
      // Nobody copied anything: the point-to-point path runs next on every rank alike.
      return false;
    }
    std::exception_ptr error;
    try {
      if (all_shared) {
        copy_shared(inputs, outputs, scatter);
      } else {
        copy_cma(inputs, outputs, scatter);
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Round 3: nobody may return (and reuse its tensors) while a peer may still be using them.
    round(
        kDoneTag, 0, [&](int32_t) { return &kOpCodes[op]; },
        [&](int32_t j) { return &arrived_[static_cast<size_t>(j)]; }, deadline,
        "the direct path's completion (a peer still pending may yet write into this rank's outputs or read its "
        "inputs: do not reuse them)");
    if (error) std::rethrow_exception(error);
    last_path_ = all_shared ? BASP_PATH_SHARED : BASP_PATH_DIRECT;
    return true;
  }

  // The staging path (any row size, ordinary memory, one node): two user-space copies per byte instead of
  // cross-memory attach, which pins every page it touches and pays per row.
  //   1. each rank writes what its peers need into its own staging region: scatter packs its input row-major
  //      into one chunk per peer (own slice straight into the output); gather copies each peer's blocks of its
  //      input into that peer's chunk;
  //   2. round "ready" (with the operation): every region is filled, and every rank is in the same call;
  //   3. each rank copies its chunk out of every peer's region: scatter into its output's blocks (large
  //      memcpy calls), gather row-major into its output (own slice straight from its input);
  //   4. round "done": nobody rewrites its region while a peer may still read it.
  // A rank writes only its own region before step 2, so a rank that gives up there (a peer never came) has
  // written nothing a late peer could not overwrite itself: the late peer reads stale chunks into its outputs and
  // then times out in step 4. Inputs are only ever read.
  void run_staged(const void* const* inputs, void* const* outputs, int32_t op, const detail::Deadline& deadline) {
    const bool scatter = op == kOpScatter;
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    std::byte* mine = staged_base_[static_cast<size_t>(me)];
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      std::byte* region = mine + staged_offset_[static_cast<size_t>(t)];
      const auto* in = static_cast<const std::byte*>(inputs[t]);
      auto* out = static_cast<std::byte*>(outputs[t]);
      if (scatter) {
        for (int32_t j = 0; j < k; ++j) staged_wire_[static_cast<size_t>(j)] = region + j * g.chunk_bytes();
        layout::pack_seq_rows_group(g, in, staged_wire_.data(), out, me, g.tensor_bytes() >= kStreamingMinBytes);
      } else {
        for (int32_t j = 0; j < k; ++j) {
          if (j != me) layout::pack_head_rows(g, in, region + j * g.chunk_bytes(), j);
        }
      }
    }
    arrive(op, deadline,
           scatter ? "the arrival of the group's ranks at basp_scatter (staged path)"
                   : "the arrival of the group's ranks at basp_gather (staged path)");
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      for (int32_t j = 0; j < k; ++j) {
        staged_wire_[static_cast<size_t>(j)] =
            staged_base_[static_cast<size_t>(j)] + staged_offset_[static_cast<size_t>(t)] + me * g.chunk_bytes();
      }
      auto* out = static_cast<std::byte*>(outputs[t]);
      if (scatter) {
        for (int32_t i = 1; i < k; ++i) {
          const int32_t j = (me + i) % k;
          layout::unpack_head_rows(g, staged_wire_[static_cast<size_t>(j)], out, j);
        }
      } else {
        layout::unpack_seq_rows_group(g, staged_wire_.data(), static_cast<const std::byte*>(inputs[t]), out, me,
                                      g.tensor_bytes() >= kStreamingMinBytes);
      }
    }
    round(
        kDoneTag, 0, [&](int32_t) { return &kOpCodes[op]; },
        [&](int32_t j) { return &arrived_[static_cast<size_t>(j)]; }, deadline,
        "the staged path's completion (a peer still pending may yet read this rank's staging area)");
    last_path_ = BASP_PATH_STAGED;
  }

  // The "arrive" round: every peer tells which operation it is in; any difference is a mismatch on every rank.
  void arrive(int32_t op, const detail::Deadline& deadline, const char* step) {
    round(
        kArriveTag, sizeof(int32_t), [&](int32_t) { return &kOpCodes[op]; },
        [&](int32_t j) { return &arrived_[static_cast<size_t>(j)]; }, deadline, step);
    arrived_[static_cast<size_t>(plan_.position)] = op;
    for (int32_t j = 0; j < plan_.group_size; ++j) {
      if (arrived_[static_cast<size_t>(j)] != op) report_mixed_operations();
    }
  }

  [[noreturn]] void report_mixed_operations() const {
    std::string detail;
    std::vector<std::pair<int32_t, std::vector<int32_t>>> by_op;
    for (size_t j = 0; j < arrived_.size(); ++j) {
      auto it = std::find_if(by_op.begin(), by_op.end(), [&](const auto& e) { return e.first == arrived_[j]; });
      if (it == by_op.end()) {
        by_op.push_back({arrived_[j], {context_->members[j]}});
      } else {
        it->second.push_back(context_->members[j]);
      }
    }
    for (const auto& [op, ranks] : by_op) {
      detail +=
          std::string(detail.empty() ? "" : ", ") + "rank " + runtime::compress_ranks(ranks) + " = " + op_name(op);
    }
    detail::fail(BASP_ERROR_MISMATCH, "the ranks of ", context_->where,
                 " are not in the same operation of this plan: ", detail);
  }

  // Every head-sharded tensor is mapped here: one pass over the rows, row-major across the whole group (see
  // layout::scatter_rows_group), the rank's own slice included.
  void copy_shared(const void* const* inputs, void* const* outputs, bool scatter) {
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      for (int32_t j = 0; j < k; ++j) {
        shared_heads_[static_cast<size_t>(j)] =
            j == me ? static_cast<std::byte*>(scatter ? outputs[t] : const_cast<void*>(inputs[t]))
                    : shared_->translate(j, peer_ptrs_[static_cast<size_t>(j * n + t)],
                                         static_cast<uint64_t>(g.tensor_bytes()));
      }
      const bool streaming = g.tensor_bytes() >= kStreamingMinBytes;
      if (scatter) {
        layout::scatter_rows_group(g, static_cast<const std::byte*>(inputs[t]), shared_heads_.data(), me, streaming);
      } else {
        layout::gather_rows_group(g, shared_heads_.data(), static_cast<std::byte*>(outputs[t]), me, streaming);
      }
    }
  }

  // Cross-memory attach, one system call per peer and tile of rows: a tile (about kCmaTileBytes of the
  // sequence-sharded tensor) is visited by every peer's call in turn while it is still in cache, instead of K
  // strided passes over the whole tensor.
  void copy_cma(const void* const* inputs, void* const* outputs, bool scatter) {
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      const int64_t rb = g.row_bytes();
      const int64_t rows = g.rows();
      const int64_t tile = std::clamp<int64_t>(kCmaTileBytes / std::max<int64_t>(1, rb * k), 1,
                                               static_cast<int64_t>(CmaChannel::kMaxIov));
      auto* in = const_cast<std::byte*>(static_cast<const std::byte*>(inputs[t]));  // read from only
      auto* out = static_cast<std::byte*>(outputs[t]);
      for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        const int64_t r1 = std::min(rows, r0 + tile);
        for (int64_t r = r0; r < r1; ++r) {
          if (scatter) {
            std::memcpy(out + g.head_row_offset(r, me), in + g.seq_row_offset(r, me), static_cast<size_t>(rb));
          } else {
            std::memcpy(out + g.seq_row_offset(r, me), in + g.head_row_offset(r, me), static_cast<size_t>(rb));
          }
        }
        for (int32_t i = 1; i < k; ++i) {
          const int32_t j = (me + i) % k;  // staggered, so that ranks do not all target the same peer at once
          const auto remote = static_cast<uintptr_t>(peer_ptrs_[static_cast<size_t>(j * n + t)]);
          channel_.begin(pids_[j], j, /*write=*/scatter);
          for (int64_t r = r0; r < r1; ++r) {
            channel_.add((scatter ? in : out) + g.seq_row_offset(r, j), remote + g.head_row_offset(r, me), rb);
          }
          channel_.flush();
        }
      }
    }
  }

  plan::ExchangePlan plan_;
  std::shared_ptr<SharedMemory> shared_;
  std::shared_ptr<const GroupContext> context_;
  GuardedComm comm_;
  bool direct_ = false;
  bool workspace_pinned_ = false;                   // a released request may still use the workspace: never free it
  bool control_pinned_ = false;                     // ... the direct path's round buffers
  std::atomic<int32_t> last_path_{BASP_PATH_NONE};  // read by basp_plan_query from any thread
  std::vector<pid_t> pids_;
  std::vector<std::byte*> shared_heads_;
  bool staged_ = false;                  // the staging path (run_staged)
  SharedMemory staging_;                 // ... its regions: this rank's and every peer's mapping
  int64_t staging_bytes_ = 0;            // ... the size of each region
  std::vector<int64_t> staged_offset_;   // ... where tensor t's chunks start in a region
  std::vector<std::byte*> staged_base_;  // ... each position's region, mapped here
  std::vector<std::byte*> staged_wire_;  // ... scratch: one chunk pointer per position  // shared-memory path: each
                                         // position's head-sharded tensor, per tensor
  std::vector<uint64_t> my_ptrs_;
  std::vector<uint64_t> peer_ptrs_;
  std::vector<int32_t> arrived_;       // direct path: each position's operation (round 1), then scratch
  std::vector<MPI_Request> control_;   // direct path: the requests of one round
  std::vector<int32_t> control_peer_;  // ... and the peer of each
  CmaChannel channel_;
  std::vector<OwnedType> row_types_;   // one row of tensor t, contiguous bytes
  std::vector<OwnedType> head_types_;  // one peer's rows of tensor t in the head-sharded tensor
  std::vector<int> row_counts_;
  std::unique_ptr<std::byte, FreeDeleter> workspace_;
  std::vector<MPI_Request> requests_;
  std::vector<int32_t> request_peer_;  // the peer of each request, for timeout messages
};

class MpiGroupTransport final : public GroupTransport {
 public:
  MpiGroupTransport(OwnedComm world, OwnedComm group, std::shared_ptr<const GroupContext> context)
      : world_(std::move(world)), group_(std::move(group)), context_(std::move(context)) {}
  basp_backend_t backend() const override { return BASP_BACKEND_MPI; }
  void agree(const runtime::CallRecord& mine) override {
    mpi::agree(scope(), mine, detail::Deadline(context_->timeout_ms));
  }
  std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan) override {
    return std::make_unique<MpiExecutor>(group_.get(), plan, shared_, context_);
  }
  void* alloc_shared(size_t bytes) override {
    return shared_->allocate(scope(), context_->position, bytes, nullptr, detail::Deadline(context_->timeout_ms));
  }
  void free_shared(void* ptr) override {
    shared_->release(scope(), context_->position, ptr, detail::Deadline(context_->timeout_ms));
  }

 private:
  CollectiveScope scope() { return group_scope(group_, *context_); }

  OwnedComm world_;
  GuardedComm group_;
  std::shared_ptr<const GroupContext> context_;
  // Shared by the comm's plans; outlives the group communicator's users through their shared_ptr.
  std::shared_ptr<SharedMemory> shared_ = std::make_shared<SharedMemory>();
};

}  // namespace

void agree_on_parent(basp_mpi_fint_t parent, const runtime::CallRecord& mine, int64_t timeout_ms) {
  BASP_CHECK(mpi_alive(), BASP_ERROR_MPI, "MPI is not initialised (or already finalised): call MPI_Init first");
  MPI_Comm parent_comm = MPI_Comm_f2c(parent);
  BASP_CHECK_ARG(parent_comm != MPI_COMM_NULL, "parent (", parent, ") is MPI_COMM_NULL or not a communicator");
  int size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(parent_comm, &size));
  CollectiveScope scope;
  scope.comm = parent_comm;
  for (int32_t r = 0; r < size; ++r) scope.labels.push_back(r);
  scope.where = "the parent communicator (" + std::to_string(size) + " rank" + (size == 1 ? ")" : "s)");
  // An abandoned round stays on the caller's communicator, which libbasp never frees (docs/reliability.md).
  agree(scope, mine, detail::Deadline(timeout_ms));
}

std::shared_ptr<runtime::Comm> create_comm(basp_mpi_fint_t parent, const runtime::CommOptions& options) {
  BASP_CHECK(mpi_alive(), BASP_ERROR_MPI, "MPI is not initialised (or already finalised): call MPI_Init first");
  MPI_Comm parent_comm = MPI_Comm_f2c(parent);
  BASP_CHECK_ARG(parent_comm != MPI_COMM_NULL, "parent (", parent, ") is MPI_COMM_NULL or not a communicator");
  // Blocking from here on, but after agree_on_parent() every rank of the parent is inside this call.
  OwnedComm world = dup_with_errors_return(parent_comm);
  int size = 0;
  int rank = 0;
  BASP_MPI_CHECK(MPI_Comm_size(world.get(), &size));
  BASP_MPI_CHECK(MPI_Comm_rank(world.get(), &rank));
  // The MPI backend works in host memory: a rank contributes its node, no GPU. Gathered for every placement so
  // that ranks never disagree on taking part in the collective.
  const std::vector<topology::RankLocality> locality =
      allgather_locality(world.get(), topology::make_rank_locality(topology::local_node_identity()));
  plan::GroupLayout layout = runtime::plan_groups(size, options, locality);
  const int32_t color = layout.group_of[rank];
  const int32_t key = layout.position_of[rank];
  MPI_Comm group = MPI_COMM_NULL;
  BASP_MPI_CHECK(MPI_Comm_split(world.get(), color, key, &group));
  OwnedComm group_owned(group);
  BASP_MPI_CHECK(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
  auto context = std::make_shared<GroupContext>();
  context->position = key;
  context->members = layout.members[static_cast<size_t>(color)];
  context->where = runtime::describe_group(layout, color);
  context->timeout_ms = options.timeout_ms;
  auto transport = std::make_unique<MpiGroupTransport>(std::move(world), std::move(group_owned), std::move(context));
  return std::make_shared<runtime::Comm>(std::move(layout), rank, options.placement, std::move(transport));
}

}  // namespace basp::transport::mpi
