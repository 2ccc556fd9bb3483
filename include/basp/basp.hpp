// libbasp: header-only C++ wrapper over the C ABI (basp.h). RAII handles, exceptions carrying the status.
//
//   basp::CommConfig cfg;            // BASP_COMM_CONFIG_INITIALIZER
//   cfg.micro_batch = 4;
//   basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
//   basp::Plan plan(comm, basp::PlanDesc::qkv(BASP_LAYOUT_BSHD, BASP_DTYPE_BF16, S, D, Hq, Hkv));
//   plan.scatter({q, k, v}, {q_out, k_out, v_out});
#ifndef BASP_BASP_HPP
#define BASP_BASP_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "basp/basp.h"

namespace basp {

class Error : public std::runtime_error {
 public:
  Error(basp_status_t status, const std::string& message)
      : std::runtime_error(std::string(basp_status_string(status)) + ": " + message), status_(status) {}
  basp_status_t status() const noexcept { return status_; }

 private:
  basp_status_t status_;
};

inline void check(basp_status_t status) {
  if (status != BASP_SUCCESS) throw Error(status, basp_last_error());
}

struct CommConfig : basp_comm_config_v1 {
  CommConfig() : basp_comm_config_v1(BASP_COMM_CONFIG_INITIALIZER) {}
};

struct PlanDesc : basp_plan_desc_v1 {
  PlanDesc() : basp_plan_desc_v1(BASP_PLAN_DESC_INITIALIZER) {}

  // One exchange of tensors with the given head counts.
  static PlanDesc make(basp_layout_t layout, basp_dtype_t dtype, int64_t seq_len, int64_t head_dim,
                       std::initializer_list<int64_t> heads) {
    PlanDesc d;
    d.layout = layout;
    d.dtype = dtype;
    d.seq_len = seq_len;
    d.head_dim = head_dim;
    int32_t t = 0;
    for (int64_t h : heads) {
      if (t == BASP_MAX_TENSORS) throw Error(BASP_ERROR_INVALID_ARGUMENT, "more than BASP_MAX_TENSORS tensors");
      d.num_heads[t++] = h;
    }
    d.num_tensors = t;
    return d;
  }

  // Q, K and V in one exchange: K and V serve the q_heads query heads (query_heads[1] = query_heads[2] = q_heads),
  // so each position gets the KV heads its query heads read (grouped-query attention, basp_plan_desc_t).
  static PlanDesc qkv(basp_layout_t layout, basp_dtype_t dtype, int64_t seq_len, int64_t head_dim, int64_t q_heads,
                      int64_t kv_heads) {
    PlanDesc d = make(layout, dtype, seq_len, head_dim, {q_heads, kv_heads, kv_heads});
    d.query_heads[1] = d.query_heads[2] = q_heads;
    return d;
  }

  // Multi-head latent attention's Q, K and V in one exchange: `heads` heads each, q and k of qk_head_dim elements
  // (DeepSeek-V2/V3: 192, 128 + 64 rotary), v of v_head_dim (128). The output plan is make(..., v_head_dim,
  // {heads}). Sizes in 1..2^40.
  static PlanDesc mla(basp_layout_t layout, basp_dtype_t dtype, int64_t seq_len, int64_t qk_head_dim,
                      int64_t v_head_dim, int64_t heads) {
    positive("PlanDesc::mla: qk_head_dim", qk_head_dim);
    positive("PlanDesc::mla: v_head_dim", v_head_dim);
    PlanDesc d = make(layout, dtype, seq_len, qk_head_dim, {heads, heads, heads});
    d.head_dims[2] = v_head_dim;
    return d;
  }

  // The same with the rotary part of k sent once per token: q (heads, nope_dim + rope_dim), k_nope (heads,
  // nope_dim), k_rope (one head of rope_dim serving all `heads` query heads: every rank of a group holding query heads
  // receives it, and a gather sums it over them) and v (heads, v_head_dim), tensors 0..3. Sizes in 1..2^40.
  static PlanDesc mla_shared_rope(basp_layout_t layout, basp_dtype_t dtype, int64_t seq_len, int64_t nope_dim,
                                  int64_t rope_dim, int64_t v_head_dim, int64_t heads) {
    positive("PlanDesc::mla_shared_rope: nope_dim", nope_dim);
    positive("PlanDesc::mla_shared_rope: rope_dim", rope_dim);
    positive("PlanDesc::mla_shared_rope: v_head_dim", v_head_dim);
    PlanDesc d = make(layout, dtype, seq_len, nope_dim + rope_dim, {heads, heads, 1, heads});
    d.head_dims[1] = nope_dim;
    d.head_dims[2] = rope_dim;
    d.head_dims[3] = v_head_dim;
    d.query_heads[2] = heads;
    return d;
  }

 private:
  // A head size the helpers take: positive (0 would mean head_dim to the library), and small enough to add two.
  static void positive(const char* name, int64_t value) {
    if (value <= 0 || value > (int64_t{1} << 40)) {
      throw Error(BASP_ERROR_INVALID_ARGUMENT,
                  std::string(name) + " (" + std::to_string(value) + ") must be in 1..2^40");
    }
  }
};

struct RankInfo : basp_rank_info_v1 {
  RankInfo() : basp_rank_info_v1(BASP_RANK_INFO_INITIALIZER) {}
};

struct PlanInfo : basp_plan_info_v1 {
  PlanInfo() : basp_plan_info_v1(BASP_PLAN_INFO_INITIALIZER) {}
  // Tensor t's shapes, `ndim` dimensions in the layout's own order.
  std::vector<int64_t> seq_shape(int32_t t) const { return dims(seq_sharded_shape[t]); }
  std::vector<int64_t> head_shape(int32_t t) const { return dims(head_sharded_shape[t]); }

 private:
  std::vector<int64_t> dims(const int64_t* d) const { return std::vector<int64_t>(d, d + ndim); }
};

// A basp_oob_t over any object with
//   void* start(const void* send, void* recv, size_t bytes);   // starts the all-gather, returns its handle
//   bool test(void* handle);                                     // true once complete
//   void free(void* handle);
// whose methods may throw: an exception becomes an error code (the library reports BASP_ERROR_OOB), never crosses
// the C ABI. start may throw only before it started anything (the library then frees the buffers). `impl` must
// outlive basp_comm_create_oob.
template <typename Impl>
basp_oob_t make_oob(Impl& impl, int32_t rank, int32_t num_ranks) {
  struct Calls {
    static int start(void* u, const void* send, void* recv, size_t bytes, void** request) noexcept {
      try {
        *request = static_cast<Impl*>(u)->start(send, recv, bytes);
        return BASP_OOB_SUCCESS;
      } catch (...) {
        return -1;
      }
    }
    static int test(void* u, void* request) noexcept {
      try {
        return static_cast<Impl*>(u)->test(request) ? BASP_OOB_SUCCESS : BASP_OOB_IN_PROGRESS;
      } catch (...) {
        return -1;
      }
    }
    static int release(void* u, void* request) noexcept {
      try {
        static_cast<Impl*>(u)->free(request);
        return BASP_OOB_SUCCESS;
      } catch (...) {
        return -1;
      }
    }
  };
  basp_oob_t oob = BASP_OOB_INITIALIZER;
  oob.rank = rank;
  oob.num_ranks = num_ranks;
  oob.user_data = &impl;
  oob.allgather_start = &Calls::start;
  oob.allgather_test = &Calls::test;
  oob.allgather_free = &Calls::release;
  return oob;
}

// One micro-batch's membership for batch plans (basp_batch_t), owning its arrays: groups of any size, each with
// its documents (THD: indices into `lengths`, in stream order) or its sequence count (BSHD/SBHD: group_docs only).
struct Batch {
  std::vector<int32_t> group_sizes;
  std::vector<int32_t> ranks;       // group by group, by position
  std::vector<int32_t> group_docs;  // per group: documents (THD) or sequences
  std::vector<int32_t> docs;        // THD: document indices, group by group
  std::vector<int64_t> lengths;     // THD: tokens of each document, by index
  double predicted_seconds = 0;     // the planner's step time (basp_comm_partition_batch)

  // From explicit groups: members[g] by position; THD: docs[g] the documents of group g and `lengths` all of
  // them; BSHD/SBHD: sequences[g] (pass docs empty).
  static Batch of(const std::vector<std::vector<int32_t>>& members, const std::vector<std::vector<int32_t>>& docs,
                  std::vector<int64_t> lengths, const std::vector<int32_t>& sequences = {}) {
    Batch b;
    for (size_t g = 0; g < members.size(); ++g) {
      b.group_sizes.push_back(static_cast<int32_t>(members[g].size()));
      b.ranks.insert(b.ranks.end(), members[g].begin(), members[g].end());
      if (!sequences.empty()) {
        b.group_docs.push_back(sequences[g]);
      } else {
        b.group_docs.push_back(static_cast<int32_t>(docs[g].size()));
        b.docs.insert(b.docs.end(), docs[g].begin(), docs[g].end());
      }
    }
    b.lengths = std::move(lengths);
    return b;
  }
  int32_t num_groups() const { return static_cast<int32_t>(group_sizes.size()); }
  // The C view; valid while this Batch lives unchanged.
  basp_batch_t view() const {
    basp_batch_t b = BASP_BATCH_INITIALIZER;
    b.num_groups = num_groups();
    int32_t total = 0;
    for (int32_t n : group_docs) total += n;
    b.num_docs = total;
    b.group_sizes = group_sizes.data();
    b.ranks = ranks.data();
    b.group_docs = group_docs.data();
    b.docs = docs.empty() ? nullptr : docs.data();
    b.lengths = lengths.empty() ? nullptr : lengths.data();
    return b;
  }
};

using CostModel = basp_cost_model_t;

class Comm {
 public:
  Comm() = default;
  // Takes ownership of a handle from the C ABI.
  explicit Comm(basp_comm_t handle) noexcept : handle_(handle) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  ~Comm() { reset(); }

  // Collective over `parent` (a Fortran MPI handle: MPI_Comm_c2f(comm)).
  static Comm from_mpi(basp_mpi_fint_t parent, const CommConfig& config) {
    basp_comm_t h = nullptr;
    check(basp_comm_create_mpi(parent, &config, &h));
    return Comm(h);
  }

  // Collective over an ncclComm_t (passed as void*); config.backend must be BASP_BACKEND_NCCL.
  static Comm from_nccl(void* nccl_comm, const CommConfig& config) {
    basp_comm_t h = nullptr;
    check(basp_comm_create_nccl(nccl_comm, &config, &h));
    return Comm(h);
  }

  // Collective over the ranks of `oob` (see make_oob); config.backend must be BASP_BACKEND_NCCL.
  static Comm from_oob(const basp_oob_t& oob, const CommConfig& config) {
    basp_comm_t h = nullptr;
    check(basp_comm_create_oob(&oob, &config, &h));
    return Comm(h);
  }

  // seq_len 0: no token range.
  RankInfo query(int64_t seq_len = 0, int32_t rank = -1) const {
    RankInfo info;
    check(basp_comm_query(handle_, rank, seq_len, &info));
    return info;
  }

  // The documents of a packed micro-batch to the comm's groups (basp_comm_assign_documents), for world rank `rank`
  // (-1: the calling rank): the assignment, the group's documents in stream order and its cu_seqlens.
  struct Documents {
    basp_doc_assignment_t assignment = BASP_DOC_ASSIGNMENT_INITIALIZER;
    std::vector<int32_t> docs;
    std::vector<int64_t> cu_seqlens;
  };
  Documents assign_documents(const std::vector<int64_t>& lengths, int64_t capacity = 0, int32_t rank = -1) const {
    Documents out;
    const auto n = static_cast<int32_t>(lengths.size());
    out.docs.resize(lengths.size());
    out.cu_seqlens.resize(lengths.size() + 1);
    check(basp_comm_assign_documents(handle_, lengths.data(), n, capacity, rank, &out.assignment, out.docs.data(),
                                     out.cu_seqlens.data(), n));
    out.docs.resize(static_cast<size_t>(out.assignment.num_docs));
    out.cu_seqlens.resize(static_cast<size_t>(out.assignment.num_docs) + 1);
    return out;
  }

  std::vector<int32_t> group_ranks(int32_t group_index) const {
    RankInfo self = query(0);
    std::vector<int32_t> ranks(static_cast<size_t>(self.group_size));
    check(basp_comm_group_ranks(handle_, group_index, ranks.data(), self.group_size));
    return ranks;
  }

  // Collective over the group: memory its ranks map into each other (MPI backend), and its release.
  void* mem_alloc(size_t bytes) const {
    void* ptr = nullptr;
    check(basp_mem_alloc(handle_, bytes, &ptr));
    return ptr;
  }
  void mem_free(void* ptr) const { check(basp_mem_free(handle_, ptr)); }

  // The backend's asynchronous failure, or what broke the comm; std::nullopt while healthy.
  std::optional<Error> async_error() const {
    basp_status_t status = BASP_SUCCESS;
    char message[1024] = {0};
    check(basp_comm_get_async_error(handle_, &status, message, sizeof(message)));
    if (status == BASP_SUCCESS) return std::nullopt;
    return Error(status, message);
  }

  // Aborts the comm's NCCL operations (NCCL backend); the comm is broken afterwards.
  void abort() const { check(basp_comm_abort(handle_)); }

  // Batch plans (a comm made with batch_capacity > 0): the planner's groups for one packed micro-batch
  // (basp_comm_partition_batch; capacity 0: the comm's), identical on every rank for the same arguments.
  // head_dim: q's and k's head size; v_head_dim: v's (and the output's), 0 = head_dim (multi-head latent
  // attention: head_dim 192, v_head_dim 128, kv_heads = query_heads).
  Batch partition_batch(const std::vector<int64_t>& lengths, int64_t query_heads, int64_t kv_heads, int64_t head_dim,
                        basp_dtype_t dtype, int64_t capacity = 0, int64_t v_head_dim = 0) const {
    basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
    p.num_docs = static_cast<int32_t>(lengths.size());
    p.lengths = lengths.data();
    p.query_heads = query_heads;
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.dtype = dtype;
    p.capacity = capacity;
    p.v_head_dim = v_head_dim;
    const RankInfo self = query(0);
    const auto n = static_cast<size_t>(self.world_size);
    Batch b;
    b.group_sizes.resize(n);
    b.ranks.resize(n);
    b.group_docs.resize(n);
    b.docs.resize(lengths.size());
    b.lengths = lengths;
    basp_batch_t out = BASP_BATCH_INITIALIZER;
    check(basp_comm_partition_batch(handle_, &p, b.group_sizes.data(), b.ranks.data(), b.group_docs.data(),
                                    b.docs.data(), &out, &b.predicted_seconds));
    b.group_sizes.resize(static_cast<size_t>(out.num_groups));
    b.group_docs.resize(static_cast<size_t>(out.num_groups));
    return b;
  }
  [[deprecated("renamed partition_batch")]] Batch plan_batch(const std::vector<int64_t>& lengths, int64_t query_heads,
                                                             int64_t kv_heads, int64_t head_dim, basp_dtype_t dtype,
                                                             int64_t capacity = 0) const {
    return partition_batch(lengths, query_heads, kv_heads, head_dim, dtype, capacity);
  }
  CostModel cost_model() const {
    CostModel m = BASP_COST_MODEL_INITIALIZER;
    check(basp_comm_get_cost_model(handle_, &m));
    return m;
  }
  void set_cost_model(const CostModel& model) const { check(basp_comm_set_cost_model(handle_, &model)); }
  // Collective over the world: measures and stores the exchange coefficients (0: defaults).
  void calibrate(int64_t max_bytes = 0, int32_t repeats = 0) const {
    check(basp_comm_calibrate(handle_, max_bytes, repeats));
  }
  std::string export_cost_model() const {
    size_t needed = 0;
    check(basp_comm_export_cost_model(handle_, nullptr, 0, &needed));
    std::string text(needed, '\0');
    check(basp_comm_export_cost_model(handle_, text.data(), text.size(), nullptr));
    text.resize(needed - 1);
    return text;
  }
  void import_cost_model(const std::string& text) const { check(basp_comm_import_cost_model(handle_, text.c_str())); }

  basp_comm_t get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  void reset() noexcept {
    if (handle_) basp_comm_destroy(handle_);
    handle_ = nullptr;
  }

 private:
  basp_comm_t handle_ = nullptr;
};

class Plan {
 public:
  Plan() = default;
  // Collective over the calling rank's group.
  Plan(const Comm& comm, const PlanDesc& desc) : num_tensors_(static_cast<size_t>(desc.num_tensors)) {
    check(basp_plan_create(comm.get(), &desc, &handle_));
  }
  // Not collective: this rank's batch plan (basp_batch_plan_create).
  Plan(const Comm& comm, const PlanDesc& desc, const Batch& batch)
      : num_tensors_(static_cast<size_t>(desc.num_tensors)) {
    const basp_batch_t b = batch.view();
    check(basp_batch_plan_create(comm.get(), &desc, &b, &handle_));
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  Plan(Plan&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), num_tensors_(std::exchange(other.num_tensors_, 0)) {}
  Plan& operator=(Plan&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      num_tensors_ = std::exchange(other.num_tensors_, 0);
    }
    return *this;
  }
  ~Plan() { reset(); }

  PlanInfo info() const {
    PlanInfo out;
    check(basp_plan_query(handle_, &out));
    return out;
  }

  void scatter(const void* const* inputs, void* const* outputs, void* stream = nullptr) {
    check(basp_scatter(handle_, inputs, outputs, stream));
  }
  void gather(const void* const* inputs, void* const* outputs, void* stream = nullptr) {
    check(basp_gather(handle_, inputs, outputs, stream));
  }
  // THD plans: the document boundaries (cu_seqlens) of the executes that follow; empty forgets them.
  void set_documents(const std::vector<int64_t>& cu_seqlens) {
    check(basp_plan_set_documents(handle_, cu_seqlens.empty() ? nullptr : cu_seqlens.data(),
                                  cu_seqlens.empty() ? 0 : static_cast<int32_t>(cu_seqlens.size() - 1)));
  }
  // With the token count of the call (THD plans; -1 or seq_len for BSHD and SBHD).
  void scatter(int64_t num_tokens, const void* const* inputs, void* const* outputs, void* stream = nullptr) {
    check(basp_scatter_tokens(handle_, num_tokens, inputs, outputs, stream));
  }
  void gather(int64_t num_tokens, const void* const* inputs, void* const* outputs, void* stream = nullptr) {
    check(basp_gather_tokens(handle_, num_tokens, inputs, outputs, stream));
  }
  // Split-phase head chunks (basp.h, "Split-phase exchanges by head chunks"): chunk `chunk` of `num_chunks`, started
  // at once, tested, waited for (its error thrown by the wait).
  void scatter_start(int32_t chunk, int32_t num_chunks, const void* const* inputs, void* const* outputs,
                     int64_t num_tokens = -1, void* stream = nullptr) {
    check(basp_scatter_start(handle_, chunk, num_chunks, num_tokens, inputs, outputs, stream));
  }
  void gather_start(int32_t chunk, int32_t num_chunks, const void* const* inputs, void* const* outputs,
                    int64_t num_tokens = -1, void* stream = nullptr) {
    check(basp_gather_start(handle_, chunk, num_chunks, num_tokens, inputs, outputs, stream));
  }
  bool scatter_test(int32_t chunk) {
    int32_t done = 0;
    check(basp_scatter_test(handle_, chunk, &done));
    return done != 0;
  }
  bool gather_test(int32_t chunk) {
    int32_t done = 0;
    check(basp_gather_test(handle_, chunk, &done));
    return done != 0;
  }
  void scatter_wait(int32_t chunk) { check(basp_scatter_wait(handle_, chunk)); }
  void gather_wait(int32_t chunk) { check(basp_gather_wait(handle_, chunk)); }
  int32_t max_head_chunks() const { return info().max_head_chunks; }

  void scatter(std::initializer_list<const void*> inputs, std::initializer_list<void*> outputs,
               void* stream = nullptr) {
    run(inputs.begin(), outputs.begin(), stream, inputs.size(), outputs.size(), &basp_scatter);
  }
  void gather(std::initializer_list<const void*> inputs, std::initializer_list<void*> outputs, void* stream = nullptr) {
    run(inputs.begin(), outputs.begin(), stream, inputs.size(), outputs.size(), &basp_gather);
  }

  // basp_choose_head_chunks for a layer of a scatter on this plan, attention, and a gather on `gather` (nullptr:
  // this plan): the chosen head chunk count and the predicted layer seconds T(1..max_head_chunks).
  struct HeadChunkChoice {
    int32_t num_chunks = 1;
    int32_t max_head_chunks = 1;
    double attention_seconds = 0.0;  // the seconds the choice used (collective: the maximum over the ranks)
    std::vector<double> predicted_seconds;
  };
  HeadChunkChoice choose_head_chunks(double attention_seconds, const Plan* gather = nullptr, int64_t num_tokens = -1,
                                     bool collective = false) const {
    const basp_plan_t g = gather != nullptr ? gather->handle_ : nullptr;
    basp_head_chunk_choice_t c = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
    HeadChunkChoice out;
    out.predicted_seconds.resize(256);
    // A plan of more chunks asks again with room for all: every rank of the group sees the same maximum, so a
    // collective call is repeated on all of them.
    for (;;) {
      const auto capacity = static_cast<int32_t>(out.predicted_seconds.size());
      check(basp_choose_head_chunks(handle_, g, num_tokens, attention_seconds, collective ? 1 : 0, &c,
                                    out.predicted_seconds.data(), capacity));
      if (c.max_head_chunks <= capacity) break;
      out.predicted_seconds.resize(static_cast<size_t>(c.max_head_chunks));
    }
    out.predicted_seconds.resize(static_cast<size_t>(c.max_head_chunks));
    out.num_chunks = c.num_chunks;
    out.max_head_chunks = c.max_head_chunks;
    out.attention_seconds = c.attention_seconds;
    return out;
  }

  basp_plan_t get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  void reset() noexcept {
    if (handle_) basp_plan_destroy(handle_);
    handle_ = nullptr;
  }

 private:
  using ExecFn = basp_status_t (*)(basp_plan_t, const void* const*, void* const*, void*);
  void run(const void* const* in, void* const* out, void* stream, size_t n_in, size_t n_out, ExecFn fn) {
    const size_t tensors = num_tensors_;
    if (n_in != tensors || n_out != tensors) {
      throw Error(BASP_ERROR_INVALID_ARGUMENT, std::to_string(n_in) + " inputs and " + std::to_string(n_out) +
                                                   " outputs given, the plan has " + std::to_string(tensors) +
                                                   " tensors");
    }
    check(fn(handle_, in, out, stream));
  }

  basp_plan_t handle_ = nullptr;
  size_t num_tensors_ = 0;
};

// tensor_split's range of part `index` of `items` over `parts` (basp_split): {begin, end}.
inline std::pair<int64_t, int64_t> split(int64_t items, int32_t parts, int32_t index) {
  int64_t begin = 0, end = 0;
  check(basp_split(items, parts, index, &begin, &end));
  return {begin, end};
}

inline std::string version_string() {
  int major = 0, minor = 0, patch = 0;
  check(basp_get_version(&major, &minor, &patch));
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace basp

#endif  // BASP_BASP_HPP
