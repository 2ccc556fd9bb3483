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
// When every rank of the group shares one node (MPI_COMM_TYPE_SHARED) and the kernel allows cross-memory
// attach, the plan uses the *direct* path instead: one small allgather publishes the head-sharded tensors'
// addresses, then each rank moves its rows to or from each peer's head-sharded tensor with one system call
// per peer (scatter: process_vm_writev from my input rows into the peer's output; gather: process_vm_readv from
// the peer's input into my output rows), one copy per byte and no pack; a barrier keeps every tensor alive
// until the peers are done with it. BASP_MPI_TRANSPORT=p2p|direct forces one path (auto: direct where
// possible).
//
// Fastest of all: when every head-sharded tensor of the exchange lives in memory from basp_mem_alloc (mapped
// by every rank of the group, see shared_memory.h), the rows move with plain memcpy into (scatter) or out of
// (gather) the peers' tensors: one user-space copy, no system call per row, any row size.
#include "transport/mpi/mpi_transport.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "layout/host_copy.h"
#include "transport/mpi/cma.h"
#include "transport/mpi/mpi_locality.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/shared_memory.h"

namespace basp::transport::mpi {
namespace {

constexpr int kScatterTagBase = 0;
constexpr int kGatherTagBase = BASP_MAX_TENSORS;
constexpr int64_t kDirectMinRowBytes = 1024;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

int to_int(int64_t v, const char* what) {
  BASP_CHECK_ARG(v >= 0 && v <= INT_MAX, what, " (", v, ") exceeds the MPI count limit (", INT_MAX, ")");
  return static_cast<int>(v);
}

class MpiExecutor final : public PlanExecutor {
 public:
  MpiExecutor(MPI_Comm group, const plan::ExchangePlan& plan, std::shared_ptr<SharedMemory> shared)
      : plan_(plan), shared_(std::move(shared)) {
    comm_ = dup_with_errors_return(group);
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
    if (plan_.workspace_bytes > 0) {
      const auto bytes = static_cast<size_t>((plan_.workspace_bytes + 63) / 64 * 64);
      workspace_.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
      if (!workspace_) detail::fail(BASP_ERROR_OUT_OF_MEMORY, "workspace of ", bytes, " bytes");
      std::memset(workspace_.get(), 0, bytes);  // fault the pages in now, not in the first execute
    }
    requests_.assign(static_cast<size_t>(2 * n * (plan_.group_size - 1)), MPI_REQUEST_NULL);
    direct_ = plan_.group_size > 1 && choose_direct();
    my_ptrs_.assign(static_cast<size_t>(n), 0);
    peer_ptrs_.assign(static_cast<size_t>(n * plan_.group_size), 0);
  }

  int32_t last_path() const override { return last_path_; }

  int64_t workspace_bytes() const override { return plan_.workspace_bytes; }

  void scatter(const void* const* inputs, void* const* outputs, void*) override {
    if (try_direct(inputs, outputs, /*scatter=*/true)) return;
    last_path_ = plan_.group_size == 1 ? BASP_PATH_LOCAL : BASP_PATH_P2P;
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    MPI_Comm comm = comm_.get();
    size_t nreq = 0;
    // Receives first, from the peers in the order they will send to us.
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me - i + k) % k;
      for (int32_t t = 0; t < n; ++t) {
        auto* out = static_cast<std::byte*>(outputs[t]) + plan_.tensors[t].head_row_offset(0, j);
        BASP_MPI_CHECK(MPI_Irecv(out, 1, head_types_[t].get(), j, kScatterTagBase + t, comm, &requests_[nreq++]));
      }
    }
    // Pack each peer's chunk and send it at once, so packing the next overlaps the transfer of this one.
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me + i) % k;
      for (int32_t t = 0; t < n; ++t) {
        std::byte* chunk = workspace_.get() + plan_.workspace_offset(t, j);
        layout::pack_seq_rows(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]), chunk, j);
        BASP_MPI_CHECK(MPI_Isend(chunk, row_counts_[t], row_types_[t].get(), j, kScatterTagBase + t, comm,
                                 &requests_[nreq++]));
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      layout::copy_seq_to_head(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]),
                               static_cast<std::byte*>(outputs[t]), me);
    }
    BASP_MPI_CHECK(MPI_Waitall(static_cast<int>(nreq), requests_.data(), MPI_STATUSES_IGNORE));
  }

  void gather(const void* const* inputs, void* const* outputs, void*) override {
    if (try_direct(inputs, outputs, /*scatter=*/false)) return;
    last_path_ = plan_.group_size == 1 ? BASP_PATH_LOCAL : BASP_PATH_P2P;
    const int32_t k = plan_.group_size;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    MPI_Comm comm = comm_.get();
    const size_t nrecv = static_cast<size_t>(n * (k - 1));
    size_t nreq = 0;
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me - i + k) % k;
      for (int32_t t = 0; t < n; ++t) {
        std::byte* chunk = workspace_.get() + plan_.workspace_offset(t, j);
        BASP_MPI_CHECK(MPI_Irecv(chunk, row_counts_[t], row_types_[t].get(), j, kGatherTagBase + t, comm,
                                 &requests_[nreq++]));
      }
    }
    for (int32_t i = 1; i < k; ++i) {
      const int32_t j = (me + i) % k;
      for (int32_t t = 0; t < n; ++t) {
        const auto* in = static_cast<const std::byte*>(inputs[t]) + plan_.tensors[t].head_row_offset(0, j);
        BASP_MPI_CHECK(MPI_Isend(in, 1, head_types_[t].get(), j, kGatherTagBase + t, comm, &requests_[nreq++]));
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      layout::copy_head_to_seq(plan_.tensors[t], static_cast<const std::byte*>(inputs[t]),
                               static_cast<std::byte*>(outputs[t]), me);
    }
    // Unpack each chunk as soon as it lands.
    for (size_t done = 0; done < nrecv; ++done) {
      int index = MPI_UNDEFINED;
      BASP_MPI_CHECK(MPI_Waitany(static_cast<int>(nrecv), requests_.data(), &index, MPI_STATUS_IGNORE));
      if (index == MPI_UNDEFINED) break;
      const int32_t i = index / n + 1;
      const int32_t t = index % n;
      const int32_t j = (me - i + k) % k;
      layout::unpack_seq_rows(plan_.tensors[t], workspace_.get() + plan_.workspace_offset(t, j),
                              static_cast<std::byte*>(outputs[t]), j);
    }
    BASP_MPI_CHECK(MPI_Waitall(static_cast<int>(nreq - nrecv), requests_.data() + nrecv, MPI_STATUSES_IGNORE));
  }

 private:
  // Collective: true when every rank of the group can reach every other one's memory.
  bool choose_direct() {
    const char* env = std::getenv("BASP_MPI_TRANSPORT");
    const std::string mode = env ? env : "auto";
    BASP_CHECK_ARG(mode == "auto" || mode == "p2p" || mode == "direct", "BASP_MPI_TRANSPORT (", mode,
                   ") must be auto, p2p or direct");
    MPI_Comm comm = comm_.get();
    // Every rank must take the same path, whatever its environment says: agree on the strictest request.
    int want = mode == "p2p" ? 0 : mode == "auto" ? 1 : 2;
    int min_want = 0, max_want = 0;
    BASP_MPI_CHECK(MPI_Allreduce(&want, &min_want, 1, MPI_INT, MPI_MIN, comm));
    BASP_MPI_CHECK(MPI_Allreduce(&want, &max_want, 1, MPI_INT, MPI_MAX, comm));
    if (min_want == 0) return false;
    // The kernel pays per local range: below about 1 KiB rows, pack + send moves bytes faster than one range
    // per row (measured on the 2-core CI machine: 256-byte rows 4.3x a bare all-to-all direct vs 2.5x packed;
    // 1 KiB rows 1.7x vs 2.0x). A forced "direct" ignores this.
    int64_t min_row = INT64_MAX;
    for (const auto& g : plan_.tensors) min_row = std::min(min_row, g.row_bytes());
    if (max_want == 1 && min_row < kDirectMinRowBytes) return false;
    // Same node?
    MPI_Comm shared = MPI_COMM_NULL;
    BASP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
    OwnedComm shared_owned(shared);
    int shared_size = 0;
    BASP_MPI_CHECK(MPI_Comm_size(shared, &shared_size));
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
    BASP_MPI_CHECK(MPI_Allgather(&mine, sizeof(Endpoint), MPI_BYTE, all.data(), sizeof(Endpoint), MPI_BYTE, comm));
    int ok = shared_size == k ? 1 : 0;
    for (int j = 0; j < k && ok; ++j) {
      if (j != me) ok = cma_probe(static_cast<pid_t>(all[j].pid), all[j].address, 0xBA5Bull << 32 | static_cast<uint64_t>(j));
    }
    int all_ok = 0;
    BASP_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
    BASP_CHECK(all_ok || max_want < 2, BASP_ERROR_UNSUPPORTED, "BASP_MPI_TRANSPORT=direct was requested but ",
               shared_size != k ? "the group spans several nodes" : "cross-memory attach (process_vm_readv) is not permitted between the group's ranks");
    for (const Endpoint& e : all) pids_.push_back(static_cast<pid_t>(e.pid));
    return all_ok == 1;
  }

  // The direct paths for both directions; the remote side is always the peer's head-sharded tensor.
  // scatter: I move the rows of peer j's head slice from my input into j's output;
  // gather:  I move the rows of my tokens from j's input into my output.
  // Returns false (having moved nothing) when neither direct path applies and point-to-point must run.
  bool try_direct(const void* const* inputs, void* const* outputs, bool scatter) {
    const int32_t k = plan_.group_size;
    if (k == 1 || !(direct_ || shared_->has_shared_regions())) return false;
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    MPI_Comm comm = comm_.get();
    for (int32_t t = 0; t < n; ++t) {
      my_ptrs_[t] = reinterpret_cast<uint64_t>(scatter ? static_cast<const void*>(outputs[t]) : inputs[t]);
    }
    BASP_MPI_CHECK(MPI_Allgather(my_ptrs_.data(), n, MPI_UINT64_T, peer_ptrs_.data(), n, MPI_UINT64_T, comm));
    // Every rank holds the same table of shared regions, so every rank reaches the same verdict here.
    bool all_shared = true;
    for (int32_t j = 0; j < k && all_shared; ++j) {
      for (int32_t t = 0; t < n && all_shared; ++t) {
        all_shared = shared_->translate(j, peer_ptrs_[static_cast<size_t>(j * n + t)],
                                        static_cast<uint64_t>(plan_.tensors[t].tensor_bytes())) != nullptr;
      }
    }
    if (!all_shared && !direct_) return false;
    std::exception_ptr error;
    try {
      for (int32_t t = 0; t < n; ++t) {
        const layout::Geometry& g = plan_.tensors[t];
        if (scatter) {
          layout::copy_seq_to_head(g, static_cast<const std::byte*>(inputs[t]), static_cast<std::byte*>(outputs[t]), me);
        } else {
          layout::copy_head_to_seq(g, static_cast<const std::byte*>(inputs[t]), static_cast<std::byte*>(outputs[t]), me);
        }
      }
      for (int32_t i = 1; i < k; ++i) {
        const int32_t j = (me + i) % k;  // staggered, so that ranks do not all target the same peer at once
        if (all_shared) {
          copy_shared(inputs, outputs, scatter, j);
        } else {
          copy_cma(inputs, outputs, scatter, j);
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Nobody may return (and reuse its tensors) while a peer may still be using them.
    BASP_MPI_CHECK(MPI_Barrier(comm));
    if (error) std::rethrow_exception(error);
    last_path_ = all_shared ? BASP_PATH_SHARED : BASP_PATH_DIRECT;
    return true;
  }

  void copy_shared(const void* const* inputs, void* const* outputs, bool scatter, int32_t j) {
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      std::byte* remote = shared_->translate(j, peer_ptrs_[static_cast<size_t>(j * n + t)],
                                             static_cast<uint64_t>(g.tensor_bytes()));
      const auto rb = static_cast<size_t>(g.row_bytes());
      if (scatter) {
        const auto* in = static_cast<const std::byte*>(inputs[t]);
        for (int64_t r = 0, rows = g.rows(); r < rows; ++r)
          std::memcpy(remote + g.head_row_offset(r, me), in + g.seq_row_offset(r, j), rb);
      } else {
        auto* out = static_cast<std::byte*>(outputs[t]);
        for (int64_t r = 0, rows = g.rows(); r < rows; ++r)
          std::memcpy(out + g.seq_row_offset(r, j), remote + g.head_row_offset(r, me), rb);
      }
    }
  }

  void copy_cma(const void* const* inputs, void* const* outputs, bool scatter, int32_t j) {
    const int32_t me = plan_.position;
    const int32_t n = plan_.num_tensors();
    channel_.begin(pids_[j], j, /*write=*/scatter);
    for (int32_t t = 0; t < n; ++t) {
      const layout::Geometry& g = plan_.tensors[t];
      const auto remote = static_cast<uintptr_t>(peer_ptrs_[static_cast<size_t>(j * n + t)]);
      const int64_t rb = g.row_bytes();
      if (scatter) {
        auto* in = const_cast<std::byte*>(static_cast<const std::byte*>(inputs[t]));  // only read from
        for (int64_t r = 0, rows = g.rows(); r < rows; ++r)
          channel_.add(in + g.seq_row_offset(r, j), remote + g.head_row_offset(r, me), rb);
      } else {
        auto* out = static_cast<std::byte*>(outputs[t]);
        for (int64_t r = 0, rows = g.rows(); r < rows; ++r)
          channel_.add(out + g.seq_row_offset(r, j), remote + g.head_row_offset(r, me), rb);
      }
    }
    channel_.flush();
  }

  plan::ExchangePlan plan_;
  std::shared_ptr<SharedMemory> shared_;
  OwnedComm comm_;
  bool direct_ = false;
  int32_t last_path_ = BASP_PATH_NONE;
  std::vector<pid_t> pids_;
  std::vector<uint64_t> my_ptrs_;
  std::vector<uint64_t> peer_ptrs_;
  CmaChannel channel_;
  std::vector<OwnedType> row_types_;   // one row of tensor t, contiguous bytes
  std::vector<OwnedType> head_types_;  // one peer's rows of tensor t in the head-sharded tensor
  std::vector<int> row_counts_;
  std::unique_ptr<std::byte, FreeDeleter> workspace_;
  std::vector<MPI_Request> requests_;
};

class MpiGroupTransport final : public GroupTransport {
 public:
  MpiGroupTransport(OwnedComm world, OwnedComm group) : world_(std::move(world)), group_(std::move(group)) {}
  basp_backend_t backend() const override { return BASP_BACKEND_MPI; }
  std::unique_ptr<PlanExecutor> make_executor(const plan::ExchangePlan& plan) override {
    return std::make_unique<MpiExecutor>(group_.get(), plan, shared_);
  }
  void* alloc_shared(size_t bytes) override {
    int position = 0;
    BASP_MPI_CHECK(MPI_Comm_rank(group_.get(), &position));
    return shared_->allocate(group_.get(), position, bytes, nullptr);
  }
  void free_shared(void* ptr) override {
    int position = 0;
    BASP_MPI_CHECK(MPI_Comm_rank(group_.get(), &position));
    shared_->release(group_.get(), position, ptr);
  }

 private:
  OwnedComm world_;
  OwnedComm group_;
  // Shared by the comm's plans; outlives the group communicator's users through their shared_ptr.
  std::shared_ptr<SharedMemory> shared_ = std::make_shared<SharedMemory>();
};

}  // namespace

std::shared_ptr<runtime::Comm> create_comm(basp_mpi_fint_t parent, const runtime::CommOptions& options) {
  BASP_CHECK(mpi_alive(), BASP_ERROR_MPI, "MPI is not initialised (or already finalised): call MPI_Init first");
  MPI_Comm parent_comm = MPI_Comm_f2c(parent);
  BASP_CHECK_ARG(parent_comm != MPI_COMM_NULL, "parent (", parent, ") is MPI_COMM_NULL or not a communicator");
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
  auto transport = std::make_unique<MpiGroupTransport>(std::move(world), std::move(group_owned));
  return std::make_shared<runtime::Comm>(std::move(layout), rank, options.placement, std::move(transport));
}

}  // namespace basp::transport::mpi
