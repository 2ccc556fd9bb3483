// The cost model of one attention layer over dynamic groups (docs/batch.md): pure arithmetic, no I/O.
//
// One exchange (a scatter or a gather) of a group of K ranks costs
//     alpha(K) + beta_node * node_bytes + beta_network * network_bytes,   alpha(K) = a0 + a1 * (K - 1)
// where node_bytes are the bytes the slowest rank of the group moves to peers of its own node (NVLink domain) and
// network_bytes the bytes that cross the busiest node link the group uses, summed over every group whose traffic
// crosses that link in the same step (groups that share a link share its bandwidth). The attention of a group is
//     (c2 * sum(L^2) + c1 * sum(L)) * share,   share = the query heads of the group's busiest rank / Hq
// for its documents of lengths L (c2, c1: seconds for all Hq heads on one rank, given by the caller).
// A layer's predicted time is the max over groups of scatter + attention + gather.
//
// An exchange cut into C head chunks (head_chunks.h) moves the same bytes as the whole one, but its copies move
// each row's heads as C pieces C times shorter: every (row, peer) piece of the whole exchange becomes C pieces, and
// on paths where the exchange is host copies (shared memory inside a node) a short piece costs more per byte than a
// long one (measured on the CI VM: one rank's 128 MiB scatter 13 ms whole, 26, 39 and 47 ms as 2, 4 and 8 chunks).
// The model charges that as
//     per_piece * pieces * (C - 1)
// over the C chunks (per_piece * pieces * (C - 1) / C on each), pieces being the row pieces the slowest rank of the
// whole exchange copies to its peers (its rows times K - 1) where the exchange crosses no network link, and 0 where
// it does: there the link bounds the exchange and the copies run beside its transfers (measured on the same VM: the
// same chunks gain 1.15-1.42x across its emulated link), so one coefficient, fitted on host copies, would price
// chunks the link hides. The whole exchange's own pieces are inside the bytes'
// coefficients, fitted on whole exchanges, so C = 1 costs exactly what it did without the term: a model with
// per_piece = 0 (every model before it, an imported text without it) predicts every exchange as before. Linear in
// the extra pieces: the simplest form with one coefficient, fitted from whole and 2-chunk exchanges of the same
// bytes (calibration.h). The measured cost grows less than linearly with C (the probe above: 13, 13, 9 ms more per
// doubling), so a per_piece fitted at C = 2 overprices larger C there: it errs towards fewer chunks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basp::plan {

struct CostModel {
  // Exchange: seconds, seconds per extra peer, seconds per byte (inside a node / NVLink domain, across nodes).
  double a0 = 0.0;
  double a1 = 0.0;
  double beta_node = 0.0;
  double beta_network = 0.0;
  // Attention: seconds per squared token and per token, for all query heads on one rank.
  double c2 = 0.0;
  double c1 = 0.0;
  // Chunked exchanges: seconds per extra row piece (above). 0: chunks cost their bytes as the whole exchange does.
  double per_piece = 0.0;
  // Where the exchange coefficients came from: "default", "calibrated", "imported" (free text, one line).
  std::string source = "default";
  // Calibration context, informative only: world size, nodes, date (free text, one line each; may be empty).
  int32_t world_size = 0;
  int32_t num_nodes = 0;
  std::string note;

  double alpha(int32_t k) const { return k <= 1 ? 0.0 : a0 + a1 * (k - 1); }
  // One exchange of a group of k ranks (0 for k == 1: no exchange).
  double exchange_seconds(int32_t k, double node_bytes, double network_bytes) const {
    return k <= 1 ? 0.0 : alpha(k) + beta_node * node_bytes + beta_network * network_bytes;
  }
  // The extra seconds of one of `count` chunks whose pieces of the whole exchange are `pieces` (0 for count 1).
  double chunk_piece_seconds(double pieces, int32_t count) const {
    return count <= 1 ? 0.0 : per_piece * pieces * (count - 1) / count;
  }
  double attention_seconds(double sum_sq, double sum, double share) const { return (c2 * sum_sq + c1 * sum) * share; }
};

// The model a comm starts with: rough figures for host memory and a 100 Gbit/s link (docs/batch.md), so that the
// planner runs before any calibration; attention coefficients 0 until the caller sets them. Orders of magnitude,
// not measurements: a0 = 20 us (a few synchronizations of the group over shared memory or MPI, a few us each),
// a1 = 5 us per extra peer (about one intra-node MPI message latency), beta_node = 1 / (5 GB/s) (one memory-bound
// copy by one core through shared memory or cross-memory attach), beta_network = 1 / (12.5 GB/s) (the line rate of
// 100 Gbit/s), c2 = c1 = 0; source "default".
CostModel default_cost_model();

// Throws INVALID_ARGUMENT naming the coefficient as `prefix` followed by its key (prefix "model->": "model->a0 (-1)
// must be finite and >= 0") when a0, a1, beta_node, beta_network, c2, c1 or per_piece is negative or not finite.
void check_cost_model(const CostModel& model, const char* prefix);

// One measured exchange: a group of k ranks, its bytes as in CostModel, its slowest rank's seconds. chunks > 1: the
// exchange ran as that many head chunks one after another, `seconds` their sum, `pieces` the row pieces of the
// whole exchange (CostModel above); the model predicts chunks * alpha(k) + the bytes' seconds + per_piece * pieces
// * (chunks - 1).
struct CostSample {
  int32_t k = 0;
  double node_bytes = 0.0;
  double network_bytes = 0.0;
  double seconds = 0.0;
  int32_t chunks = 1;
  double pieces = 0.0;
};

// Least-squares fit of a0, a1, beta_node, beta_network to the whole samples (chunks 1), then of per_piece to the
// chunked ones' seconds above what the first fit predicts for them (the other fields come from `base`). A
// coefficient the samples cannot determine (no sample crosses a node, all samples of one K, no chunked sample with
// pieces) keeps base's value. The residuals are relative, sum(((predicted - seconds) / seconds)^2): timings spread
// over orders of magnitude with a roughly constant relative noise. Negative fitted values are clamped to 0 (and the
// others fitted again); source becomes "calibrated". Samples all whole fit exactly as before per_piece existed.
// Throws INVALID_ARGUMENT naming the sample when one is malformed (k < 2, negative bytes or pieces, seconds <= 0 or
// not finite, chunks < 1) or when there is no whole sample.
CostModel fit_exchange(const std::vector<CostSample>& samples, const CostModel& base);

// A plain text form, one "key value" per line, starting with the line "basp-cost-model 1"; import is strict and
// throws INVALID_ARGUMENT naming the line number and the key or value on any malformed input (unknown key,
// missing key, bad number, negative or non-finite coefficient, duplicate key, a line over 1,000 characters, a NUL
// byte). The keys: a0 a1 beta_node beta_network c2 c1 (required; doubles written exactly: the shortest text that
// reads back to the same bits), per_piece (optional, 0 when missing; written only when not 0, so that a model
// without it exports the text earlier versions wrote and read), source, world_size, num_nodes, note (optional;
// source and note are the rest of the line); "#" lines and blank lines are comments. A missing source reads as
// "imported". Export throws
// INVALID_ARGUMENT for a model the text cannot hold (a negative or non-finite coefficient, a newline in a string).
std::string export_cost_model(const CostModel& model);
CostModel import_cost_model(const std::string& text);

}  // namespace basp::plan
