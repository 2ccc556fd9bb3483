#include "runtime/head_chunk_choice.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/rank_list.h"
#include "plan/head_chunks.h"
#include "transport/bootstrap.h"

namespace basp::runtime {
namespace {

constexpr const char* kCall = "basp_choose_head_chunks";

// num_tokens as an execute of `plan` takes it (Plan::execute), resolved to the tokens per sequence (THD: of the
// stream). `which` names the plan in the message.
int64_t layer_tokens(const Plan& plan, int64_t tokens, const char* which) {
  const plan::ExchangeSpec& spec = plan.exchange().spec;
  if (spec.thd() && plan.batch()) {
    const int64_t stream = plan.info().head_sharded_shape[0][0];  // [T, H_l, D]: the group's stream
    BASP_CHECK_ARG(tokens == -1 || tokens == stream, "num_tokens (", tokens, ") must be -1 or the stream of the ",
                   which, " batch plan's group (", stream, ")");
    return stream;
  }
  if (spec.thd()) {
    BASP_CHECK_ARG(tokens >= 0 && tokens <= spec.seq_len, "num_tokens (", tokens, ") is outside 0..token_capacity (",
                   spec.seq_len, ") of the ", which, " plan: a THD plan takes the stream's T");
    return tokens;
  }
  BASP_CHECK_ARG(tokens == -1 || tokens == spec.seq_len, "num_tokens (", tokens, ") must be -1 or the ", which,
                 " plan's seq_len (", spec.seq_len, ")");
  return spec.seq_len;
}

// This rank's own checks; returns the layer's tokens.
int64_t check_layer(const Plan& scatter, const Plan& gather, int64_t num_tokens, double attention_seconds) {
  BASP_CHECK_ARG(std::isfinite(attention_seconds) && attention_seconds >= 0.0, "attention_seconds (", attention_seconds,
                 ") must be finite and >= 0");
  BASP_CHECK_ARG(&scatter.comm() == &gather.comm(),
                 "the scatter and gather plans belong to different comms: a layer's plans are of one group");
  BASP_CHECK_ARG(scatter.batch() == gather.batch(), "the scatter plan is ", scatter.batch() ? "a batch" : "a plain",
                 " plan and the gather plan ", gather.batch() ? "a batch" : "a plain",
                 " one: a layer's plans are of one group");
  const plan::ExchangePlan& s = scatter.exchange();
  const plan::ExchangePlan& g = gather.exchange();
  BASP_CHECK_ARG(s.group_size == g.group_size, "the scatter plan's group size (", s.group_size,
                 ") differs from the gather plan's (", g.group_size, "): a layer's plans are of one group");
  BASP_CHECK_ARG(plan::max_head_chunks(s) == plan::max_head_chunks(g), "the scatter plan's maximum head chunks (",
                 plan::max_head_chunks(s), ") differs from the gather plan's (", plan::max_head_chunks(g), ")");
  const int64_t tokens = layer_tokens(scatter, num_tokens, "scatter");
  layer_tokens(gather, num_tokens == -1 ? -1 : tokens, "gather");
  return tokens;
}

// What each rank gives the collective maximum.
struct Contribution {
  int64_t status = BASP_SUCCESS;  // of the rank's own checks
  int64_t tokens = 0;
  double attention_seconds = 0.0;
};
static_assert(std::is_trivially_copyable_v<Contribution>, "a Contribution travels as bytes");

// The maximum of attention_seconds over `bootstrap`'s ranks; throws this rank's own error, else names the ranks
// whose checks failed, else the differing token counts.
double collective_max(Comm& comm, transport::Bootstrap& bootstrap, const Contribution& mine,
                      const std::exception_ptr& own) {
  const std::vector<Contribution> all = comm.collective([&] {
    return transport::allgather_records(bootstrap, mine, std::string("the attention seconds of ") + kCall,
                                        detail::Deadline(comm.options().timeout_ms));
  });
  if (own) std::rethrow_exception(own);
  std::vector<int32_t> failed;
  double most = 0.0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].status != BASP_SUCCESS) failed.push_back(bootstrap.members()[i]);
    most = std::max(most, all[i].attention_seconds);
  }
  BASP_CHECK_ARG(failed.empty(), "the arguments of world rank(s) ", detail::compress_ranks(failed), " of ",
                 bootstrap.where(), " failed their own checks (their error names the value)");
  for (size_t i = 0; i < all.size(); ++i) {
    BASP_CHECK(all[i].tokens == mine.tokens, BASP_ERROR_MISMATCH, "the ranks of ", bootstrap.where(), " called ", kCall,
               " for different token counts: world rank ", bootstrap.members()[i], " = ", all[i].tokens,
               ", this rank = ", mine.tokens);
  }
  return most;
}

}  // namespace

plan::GroupTraffic unit_traffic(const Plan& plan) {
  const Comm& comm = plan.comm();
  const plan::UnitMap units = plan::make_unit_map(comm.machine());
  if (plan.batch()) return plan::estimate_traffic(units, plan.exchange().group_size, 1.0);
  const plan::GroupLayout& layout = comm.layout();
  const std::vector<double> per_peer(layout.members.size(), 1.0);
  const int32_t group = layout.group_of[static_cast<size_t>(comm.rank())];
  return plan::membership_traffic(units, layout.members, per_peer)[static_cast<size_t>(group)];
}

LayerHeadChunks choose_head_chunks(const Plan& scatter, const Plan& gather, int64_t num_tokens,
                                   double attention_seconds, bool collective, const std::exception_ptr& local_error) {
  scatter.check_usable();
  if (!collective) {
    if (local_error) std::rethrow_exception(local_error);
    const int64_t tokens = check_layer(scatter, gather, num_tokens, attention_seconds);
    return {plan::choose_head_chunks(scatter.exchange(), gather.exchange(), tokens, scatter.comm().cost_model(),
                                     unit_traffic(scatter), attention_seconds),
            attention_seconds};
  }
  std::exception_ptr own = local_error;
  Contribution mine;
  try {
    if (own) std::rethrow_exception(own);
    mine.tokens = check_layer(scatter, gather, num_tokens, attention_seconds);
    mine.attention_seconds = attention_seconds;
  } catch (const detail::Error&) {
    own = std::current_exception();
    mine.status = detail::status_of(own);
  }
  Comm& comm = scatter.shared_comm();
  transport::Bootstrap& bootstrap = scatter.batch() ? comm.batch_transport(kCall).world() : comm.transport().group();
  const double most = collective_max(comm, bootstrap, mine, own);
  return {plan::choose_head_chunks(scatter.exchange(), gather.exchange(), mine.tokens, comm.cost_model(),
                                   unit_traffic(scatter), most),
          most};
}

}  // namespace basp::runtime
