#include "runtime/batch.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/fnv.h"
#include "common/rank_list.h"
#include "common/split.h"
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

// Adds the tensors, the comm's size and the number of groups to the fingerprint.
void add_tensors(Fingerprint& fp, const plan::ExchangeSpec& tensors, int32_t comm_size, size_t num_groups) {
  for (int64_t v : {int64_t{tensors.layout}, int64_t{tensors.dtype}, tensors.seq_len,
                    static_cast<int64_t>(tensors.num_heads.size())}) {
    fp.add(v);
  }
  for (size_t t = 0; t < tensors.num_heads.size(); ++t) {
    fp.add(tensors.num_heads[t]);
    fp.add(tensors.split_heads[t]);
    fp.add(tensors.head_dims[t]);
  }
  fp.add(comm_size);
  fp.add(static_cast<int64_t>(num_groups));
}

// Checks the membership (a partition of the comm's ranks 0..N-1) into out.members, group_of and position_of.
void check_membership(const BatchRequest& request, int32_t comm_size, Fingerprint& fp, CheckedBatch& out) {
  const auto num_groups = static_cast<int64_t>(request.groups.size());
  BASP_CHECK_ARG(num_groups >= 1 && num_groups <= comm_size, "batch->num_groups (", num_groups, ") must be in 1..",
                 comm_size, " (the comm's ranks)");
  out.group_of.assign(static_cast<size_t>(comm_size), -1);
  out.position_of.assign(static_cast<size_t>(comm_size), -1);
  int64_t listed = 0;
  for (int32_t g = 0; g < num_groups; ++g) {
    const std::vector<int32_t>& members = request.groups[static_cast<size_t>(g)].members;
    const auto k = static_cast<int64_t>(members.size());
    BASP_CHECK_ARG(k >= 1 && listed + k <= comm_size, "batch->group_sizes[", g, "] (", k,
                   ") must be positive, and the sizes must sum to the comm's ", comm_size, " ranks");
    for (int32_t p = 0; p < k; ++p) {
      const int32_t r = members[static_cast<size_t>(p)];
      BASP_CHECK_ARG(r >= 0 && r < comm_size, "batch->ranks[", listed + p, "] (", r, ") is outside 0..", comm_size - 1);
      const auto at = static_cast<size_t>(r);
      BASP_CHECK_ARG(out.group_of[at] == -1, "batch->ranks lists rank ", r, " in group ", out.group_of[at],
                     " and in group ", g, ": the groups must partition the comm's ranks");
      out.group_of[at] = g;
      out.position_of[at] = p;
      fp.add(r);
    }
    fp.add(-1);
    listed += k;
    out.members.push_back(members);
  }
  BASP_CHECK_ARG(listed == comm_size, "batch->group_sizes sum to ", listed, ", not to the comm's ", comm_size,
                 " ranks: the groups must partition them");
}

// Checks group g of a BSHD or SBHD batch: its count of sequences of seq_len tokens, against the capacity.
void check_group_sequences(const BatchRequest& request, int32_t g, int64_t capacity, Fingerprint& fp,
                           CheckedBatch& out) {
  const RequestedGroup& group = request.groups[static_cast<size_t>(g)];
  const int64_t n = group.sequences;
  const auto k = static_cast<int32_t>(group.members.size());
  const int64_t seq_len = request.tensors.seq_len;
  BASP_CHECK_ARG(n >= 1, "batch->group_docs[", g, "] (", n,
                 ") must be positive (a BSHD or SBHD group holds sequences)");
  BASP_CHECK_ARG(capacity <= 0 || n * tokens_per_rank(seq_len, k) <= capacity, "batch: group ", g, " (", k, " ranks, ",
                 n, " sequences of ", seq_len, " tokens) puts ", n * tokens_per_rank(seq_len, k),
                 " tokens on a rank, more than the comm's batch_capacity (", capacity, ")");
  out.counts.push_back(n);
  fp.add(n);
}

// Checks group g of a THD batch, its documents from position docs_listed of batch->docs: their lengths and its
// stream's tokens, against the capacities; `seen` marks the documents already listed.
void check_group_documents(const BatchRequest& request, int32_t g, int64_t docs_listed, int64_t capacity,
                           std::vector<bool>& seen, Fingerprint& fp, CheckedBatch& out) {
  const RequestedGroup& group = request.groups[static_cast<size_t>(g)];
  const auto k = static_cast<int32_t>(group.members.size());
  const auto num_docs = static_cast<int64_t>(request.lengths.size());
  GroupDocuments documents;
  for (size_t i = 0; i < group.docs.size(); ++i) {
    const int64_t at = docs_listed + static_cast<int64_t>(i);
    const int32_t d = group.docs[i];
    BASP_CHECK_ARG(d >= 0 && d < num_docs, "batch->docs[", at, "] (", d, ") is outside 0..", num_docs - 1);
    BASP_CHECK_ARG(!seen[static_cast<size_t>(d)], "batch->docs lists document ", d,
                   " twice: each document belongs to one group");
    seen[static_cast<size_t>(d)] = true;
    const int64_t len = request.lengths[static_cast<size_t>(d)];
    BASP_CHECK_ARG(len > 0, "batch->lengths[", d, "] (", len, ") must be positive");
    documents.cu_seqlens.push_back(documents.tokens() + len);
    fp.add(d);
  }
  const int64_t tokens = documents.tokens();
  BASP_CHECK_ARG(capacity <= 0 || tokens_per_rank(tokens, k) <= capacity, "batch: group ", g, " (", k,
                 " ranks, a stream of ", tokens, " tokens) puts ", tokens_per_rank(tokens, k),
                 " tokens on a rank, more than the comm's batch_capacity (", capacity, ")");
  BASP_CHECK_ARG(request.token_capacity == 0 || tokens <= request.token_capacity, "desc->token_capacity (",
                 request.token_capacity, ") is less than group ", g, "'s stream (", tokens,
                 " tokens): pass 0 to size each group's plan at its stream");
  documents.fingerprint =
      documents_fingerprint(documents.cu_seqlens.data(), static_cast<int32_t>(documents.cu_seqlens.size()) - 1);
  fp.add(static_cast<int64_t>(documents.fingerprint));
  fp.add(-2);
  out.counts.push_back(tokens);
  out.documents.push_back(std::move(documents));
}

// The spec of group g's plan, built from the request's tensors: THD sized at the group's stream (one token at
// least), BSHD/SBHD at the sequences' length.
plan::ExchangeSpec group_tensors(const BatchRequest& request, const CheckedBatch& batch, int32_t g) {
  plan::ExchangeSpec spec = request.tensors;
  if (spec.thd()) spec.seq_len = std::max<int64_t>(batch.counts[static_cast<size_t>(g)], 1);
  return spec;
}

}  // namespace

CheckedBatch check_batch(const BatchRequest& request, int32_t comm_size, int64_t capacity) {
  const bool thd = request.tensors.thd();
  BASP_CHECK_ARG(thd || request.lengths.empty(),
                 "batch->docs and batch->lengths must be NULL for a BSHD or SBHD plan (its sequences all have the "
                 "plan's seq_len)");
  CheckedBatch out;
  Fingerprint fp;
  add_tensors(fp, request.tensors, comm_size, request.groups.size());
  check_membership(request, comm_size, fp, out);
  int64_t docs_listed = 0;
  std::vector<bool> seen(request.lengths.size(), false);
  for (int32_t g = 0; g < static_cast<int32_t>(request.groups.size()); ++g) {
    if (thd) {
      check_group_documents(request, g, docs_listed, capacity, seen, fp, out);
      docs_listed += static_cast<int64_t>(request.groups[static_cast<size_t>(g)].docs.size());
    } else {
      BASP_CHECK_ARG(request.groups[static_cast<size_t>(g)].docs.empty(),
                     "batch->docs must be NULL for a BSHD or SBHD plan (group ", g, " lists documents)");
      check_group_sequences(request, g, capacity, fp, out);
    }
  }
  BASP_CHECK_ARG(!thd || docs_listed == static_cast<int64_t>(request.lengths.size()), "batch->group_docs sum to ",
                 docs_listed, ", not to num_docs (", request.lengths.size(), ")");
  out.fingerprint = fp.value();
  return out;
}

std::shared_ptr<Plan> make_batch_plan(const std::shared_ptr<Comm>& comm, const BatchRequest& request) {
  transport::BatchTransport& transport = comm->batch_transport("basp_batch_plan_create");
  const int32_t comm_size = comm->layout().world_size;
  const CheckedBatch batch =
      check_batch(request, comm_size, request.check_capacity ? comm->options().batch_capacity : 0);
  const auto me = static_cast<size_t>(comm->rank());
  const int32_t g = batch.group_of[me];
  const std::vector<int32_t>& members = batch.members[static_cast<size_t>(g)];
  transport::GroupInBatch group;
  group.group = transport::make_group_spec(
      g, batch.position_of[me], members,
      "batch group " + std::to_string(g) + " (world ranks " + detail::compress_ranks(members) + ")", comm_size,
      comm->options().timeout_ms);
  group.fingerprint = batch.fingerprint;
  const bool thd = request.tensors.thd();
  const int64_t count = batch.counts[static_cast<size_t>(g)];
  plan::ExchangePlan exchange = plan::make_exchange_plan(
      group_tensors(request, batch, g), static_cast<int32_t>(members.size()), group.group.position, thd ? 1 : count);
  // Counted once the arguments are known good, so that a refused call does not shift this rank's count.
  group.batch_id = comm->next_batch_id();
  // Made in the comm's queue order (progress.h): it may grow the pool, which moves it (its contents kept), and no
  // exchange in flight may see that.
  std::unique_ptr<transport::PlanExecutor> executor;
  comm->progress().in_order(
      [&] { executor = comm->collective([&] { return transport.make_batch_executor(exchange, group); }); });
  return std::make_shared<Plan>(comm, std::move(exchange), std::move(executor), thd ? count : -1,
                                thd ? batch.documents[static_cast<size_t>(g)].fingerprint : 0);
}

plan::BatchProblem batch_problem(const Comm& comm, plan::BatchProblem problem) {
  BASP_CHECK_ARG(problem.capacity >= 0, "problem->capacity (", problem.capacity,
                 ") must be 0 (the comm's) or positive");
  if (problem.capacity == 0) problem.capacity = comm.options().batch_capacity;
  problem.machine = comm.machine();
  problem.model = comm.cost_model();
  return problem;
}

}  // namespace basp::runtime
