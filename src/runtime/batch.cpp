#include "runtime/batch.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/fnv.h"
#include "common/rank_list.h"
#include "common/split.h"
#include "plan/dtype.h"
#include "runtime/plan.h"

namespace basp::runtime {
namespace {

// The same on every rank for the same description; never 0 (0: no fingerprint).
class Fingerprint {
 public:
  void add(int64_t value) { hash_.add(value); }
  uint64_t value() const { return hash_.value() == 0 ? 1 : hash_.value(); }

 private:
  detail::Fnv1a hash_;
};

// The most sequence-side tokens a rank of a group of k holds: the first position's share (tensor_split).
int64_t tokens_per_rank(int64_t tokens, int32_t k) { return detail::split_count(tokens, k, 0); }

// The checks of the batch's counts and pointers, before any is read through.
void check_batch_fields(const basp_batch_v1& b, bool thd, int32_t world_size) {
  BASP_CHECK_ARG(b.num_groups >= 1 && b.num_groups <= world_size, "batch->num_groups (", b.num_groups,
                 ") must be in 1..", world_size, " (the comm's ranks)");
  BASP_CHECK_ARG(b.num_docs >= 0, "batch->num_docs (", b.num_docs, ") must not be negative");
  BASP_CHECK(b.group_sizes != nullptr, BASP_ERROR_NULL_POINTER, "batch->group_sizes is NULL");
  BASP_CHECK(b.ranks != nullptr, BASP_ERROR_NULL_POINTER, "batch->ranks is NULL");
  BASP_CHECK(b.group_docs != nullptr, BASP_ERROR_NULL_POINTER, "batch->group_docs is NULL");
  if (thd) {
    BASP_CHECK(b.lengths != nullptr || b.num_docs == 0, BASP_ERROR_NULL_POINTER,
               "batch->lengths is NULL with num_docs (", b.num_docs, ") for a THD plan");
  } else {
    BASP_CHECK_ARG(b.docs == nullptr && b.lengths == nullptr,
                   "batch->docs and batch->lengths must be NULL for a BSHD or SBHD plan (its sequences all have the "
                   "plan's seq_len)");
  }
}

// Adds the exchange spec, the world size and the number of groups to the fingerprint.
void add_spec(Fingerprint& fp, const plan::ExchangeSpec& spec, int32_t world_size, int32_t num_groups) {
  for (int64_t v : {int64_t{spec.layout}, int64_t{spec.dtype}, spec.seq_len, spec.head_dim,
                    static_cast<int64_t>(spec.num_heads.size())}) {
    fp.add(v);
  }
  for (size_t t = 0; t < spec.num_heads.size(); ++t) {
    fp.add(spec.num_heads[t]);
    fp.add(spec.split_heads[t]);
  }
  fp.add(world_size);
  fp.add(num_groups);
}

// Reads the membership into out.members: checked to be a partition of 0..N-1.
void read_membership(const basp_batch_v1& b, int32_t world_size, Fingerprint& fp, BatchDescription& out) {
  std::vector<int32_t> group_of(static_cast<size_t>(world_size), -1);
  int64_t listed = 0;
  for (int32_t g = 0; g < b.num_groups; ++g) {
    const int32_t k = b.group_sizes[g];
    BASP_CHECK_ARG(k >= 1 && listed + k <= world_size, "batch->group_sizes[", g, "] (", k,
                   ") must be positive, and the sizes must sum to the comm's ", world_size, " ranks");
    std::vector<int32_t> members;
    for (int32_t p = 0; p < k; ++p) {
      const int32_t r = b.ranks[listed + p];
      BASP_CHECK_ARG(r >= 0 && r < world_size, "batch->ranks[", listed + p, "] (", r, ") is outside 0..",
                     world_size - 1);
      BASP_CHECK_ARG(group_of[static_cast<size_t>(r)] == -1, "batch->ranks lists rank ", r, " in group ",
                     group_of[static_cast<size_t>(r)], " and in group ", g,
                     ": the groups must partition the comm's ranks");
      group_of[static_cast<size_t>(r)] = g;
      members.push_back(r);
      fp.add(r);
    }
    fp.add(-1);
    listed += k;
    out.members.push_back(std::move(members));
  }
  BASP_CHECK_ARG(listed == world_size, "batch->group_sizes sum to ", listed, ", not to the comm's ", world_size,
                 " ranks: the groups must partition them");
}

// Reads group g of a BSHD or SBHD batch: its count of sequences of seq_len tokens, checked against the capacity.
void read_group_sequences(const basp_batch_v1& b, int32_t g, int64_t seq_len, int64_t capacity, Fingerprint& fp,
                          BatchDescription& out) {
  const int32_t n = b.group_docs[g];
  const int32_t k = b.group_sizes[g];
  out.counts.push_back(n);
  out.doc_lengths.emplace_back();
  BASP_CHECK_ARG(capacity <= 0 || n * tokens_per_rank(seq_len, k) <= capacity, "batch: group ", g, " (", k, " ranks, ",
                 n, " sequences of ", seq_len, " tokens) puts ", n * tokens_per_rank(seq_len, k),
                 " tokens on a rank, more than the comm's batch_capacity (", capacity, ")");
  fp.add(n);
}

// Reads group g of a THD batch, its documents from position docs_listed of batch->docs: their lengths and its
// stream's tokens, checked against the capacity; `seen` marks the documents already listed.
void read_group_documents(const basp_batch_v1& b, int32_t g, int64_t docs_listed, int64_t capacity,
                          std::vector<bool>& seen, Fingerprint& fp, BatchDescription& out) {
  const int32_t n = b.group_docs[g];
  const int32_t k = b.group_sizes[g];
  std::vector<int64_t> lengths;
  int64_t tokens = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t at = docs_listed + i;
    const int32_t d = b.docs != nullptr ? b.docs[at] : static_cast<int32_t>(at);
    BASP_CHECK_ARG(d >= 0 && d < b.num_docs, "batch->docs[", at, "] (", d, ") is outside 0..", b.num_docs - 1);
    BASP_CHECK_ARG(!seen[static_cast<size_t>(d)], "batch->docs lists document ", d,
                   " twice: each document belongs to one group");
    seen[static_cast<size_t>(d)] = true;
    const int64_t len = b.lengths[d];
    BASP_CHECK_ARG(len > 0, "batch->lengths[", d, "] (", len, ") must be positive");
    lengths.push_back(len);
    tokens += len;
    fp.add(d);
    fp.add(len);
  }
  BASP_CHECK_ARG(capacity <= 0 || tokens_per_rank(tokens, k) <= capacity, "batch: group ", g, " (", k,
                 " ranks, a stream of ", tokens, " tokens) puts ", tokens_per_rank(tokens, k),
                 " tokens on a rank, more than the comm's batch_capacity (", capacity, ")");
  fp.add(-2);
  out.counts.push_back(tokens);
  out.doc_lengths.push_back(std::move(lengths));
}

}  // namespace

BatchDescription read_batch(const basp_batch_v1& b, const plan::ExchangeSpec& spec, int32_t world_size,
                            int64_t capacity) {
  const bool thd = spec.thd();
  check_batch_fields(b, thd, world_size);
  BatchDescription out;
  Fingerprint fp;
  add_spec(fp, spec, world_size, b.num_groups);
  read_membership(b, world_size, fp, out);
  // The documents or sequences of each group.
  int64_t docs_listed = 0;
  std::vector<bool> seen(thd ? static_cast<size_t>(b.num_docs) : 0, false);
  for (int32_t g = 0; g < b.num_groups; ++g) {
    const int32_t n = b.group_docs[g];
    BASP_CHECK_ARG(n >= (thd ? 0 : 1) && docs_listed + n <= b.num_docs, "batch->group_docs[", g, "] (", n,
                   thd ? ") must not be negative" : ") must be positive (a BSHD or SBHD group holds sequences)",
                   ", and the counts must sum to num_docs (", b.num_docs, ")");
    if (thd) {
      read_group_documents(b, g, docs_listed, capacity, seen, fp, out);
    } else {
      read_group_sequences(b, g, spec.seq_len, capacity, fp, out);
    }
    docs_listed += n;
  }
  BASP_CHECK_ARG(docs_listed == b.num_docs, "batch->group_docs sum to ", docs_listed, ", not to num_docs (", b.num_docs,
                 ")");
  out.fingerprint = fp.value();
  return out;
}

std::shared_ptr<Plan> make_batch_plan(const std::shared_ptr<Comm>& comm, const basp_plan_desc_v1& desc,
                                      const basp_batch_v1& batch, bool check_capacity) {
  transport::BatchTransport& transport = comm->batch_transport("basp_batch_plan_create");
  basp_plan_desc_v1 d = desc;
  const bool thd = d.layout == BASP_LAYOUT_THD;
  const int64_t requested_capacity = d.token_capacity;
  if (thd && d.token_capacity == 0) d.token_capacity = 1;  // the batch fixes each group's stream
  plan::ExchangeSpec spec = plan::validate_spec(d);
  if (thd) spec.seq_len = 0;  // not part of the fingerprint: the streams are
  const int32_t world = comm->layout().world_size;
  BatchDescription description = read_batch(batch, spec, world, check_capacity ? comm->options().batch_capacity : 0);
  const int32_t g = [&] {
    for (size_t i = 0; i < description.members.size(); ++i) {
      for (int32_t r : description.members[i]) {
        if (r == comm->rank()) return static_cast<int32_t>(i);
      }
    }
    return int32_t{-1};
  }();
  BASP_CHECK(g >= 0, BASP_ERROR_INTERNAL, "rank ", comm->rank(), " is in no group of the batch");
  if (thd) {
    for (size_t i = 0; i < description.counts.size(); ++i) {
      BASP_CHECK_ARG(requested_capacity == 0 || description.counts[i] <= requested_capacity, "desc->token_capacity (",
                     requested_capacity, ") is less than group ", i, "'s stream (", description.counts[i],
                     " tokens): pass 0 to size each group's plan at its stream");
    }
    spec.seq_len = std::max<int64_t>(description.counts[static_cast<size_t>(g)], 1);
  }
  transport::GroupInBatch group;
  const auto& members = description.members[static_cast<size_t>(g)];
  group.group.index = g;
  group.group.members = members;
  group.group.position =
      static_cast<int32_t>(std::find(members.begin(), members.end(), comm->rank()) - members.begin());
  group.group.where = "batch group " + std::to_string(g) + " (world ranks " + detail::compress_ranks(members) + ")";
  group.group.timeout_ms = comm->options().timeout_ms;
  group.group.world_rank = comm->rank();
  group.group.world_size = world;
  group.fingerprint = description.fingerprint;
  const int64_t local = thd ? 1 : description.counts[static_cast<size_t>(g)];
  plan::ExchangePlan exchange =
      plan::make_exchange_plan(spec, static_cast<int32_t>(members.size()), group.group.position, local);
  // Counted once the arguments are known good, so that a refused call does not shift this rank's count.
  group.batch_id = comm->next_batch_id();
  auto executor = comm->collective([&] { return transport.make_batch_executor(exchange, group); });
  std::vector<int64_t> cu{0};
  for (int64_t len : description.doc_lengths[static_cast<size_t>(g)]) cu.push_back(cu.back() + len);
  return std::make_shared<Plan>(comm, std::move(exchange), std::move(executor),
                                thd ? description.counts[static_cast<size_t>(g)] : -1, cu);
}

plan::BatchProblem batch_problem(const Comm& comm, const basp_batch_problem_v1& p) {
  BASP_CHECK_ARG(p.num_docs >= 1, "problem->num_docs (", p.num_docs, ") must be positive");
  BASP_CHECK(p.lengths != nullptr, BASP_ERROR_NULL_POINTER, "problem->lengths is NULL");
  BASP_CHECK_ARG(p.dtype != BASP_DTYPE_UNSET && plan::dtype_size(p.dtype) > 0, "problem->dtype (", p.dtype,
                 ") is not a basp_dtype_t value");
  BASP_CHECK_ARG(p.capacity >= 0, "problem->capacity (", p.capacity, ") must be 0 (the comm's) or positive");
  plan::BatchProblem out;
  out.lengths.assign(p.lengths, p.lengths + p.num_docs);
  out.query_heads = p.query_heads;
  out.kv_heads = p.kv_heads;
  out.head_dim = p.head_dim;
  out.elem_size = plan::dtype_size(p.dtype);
  out.capacity = p.capacity > 0 ? p.capacity : comm.options().batch_capacity;
  out.machine = comm.machine();
  out.model = comm.cost_model();
  return out;
}

}  // namespace basp::runtime
