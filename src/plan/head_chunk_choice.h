// How many head chunks (head_chunks.h) a layer's exchanges should be cut into, from the comm's cost model
// (cost_model.h): pure arithmetic, the same on every rank from the same inputs. basp_choose_head_chunks asks it
// (runtime/head_chunk_choice.h), and so do the PyTorch layers with chunks="auto".
//
// A layer is a scatter (plan `scatter`), attention and a gather (plan `gather`, which may be the same plan) over one
// group. Cut into C head chunks, attention on chunk c runs beside scatter chunk c + 1 and gather chunk c - 1:
//
//     T(C) = S_0 + sum over c = 0..C-1 of max(A_c, S_{c+1} + G_{c-1}) + G_{C-1},     S_C = G_{-1} = 0
//
//   S_c, G_c  scatter and gather chunk c, each one exchange of cost_model.h: exchange_seconds(K, P_c *
//             unit.node_bytes, P_c * unit.network_bytes) with P_c = chunk_per_peer(plan, tokens, {c, C}, direction).
//             A group's node and network bytes are linear in its per-peer bytes (traffic.h), so `unit` is the
//             traffic of one per-peer byte: estimate_traffic(m, K, 1), or membership_traffic with per_peer 1;
//             plus chunk_piece_seconds(unit.node_bytes * chunk_pieces_per_peer(plan, tokens, {c, C}, direction),
//             C), the cost of chunk c's shorter row pieces (cost_model.h; 0 for C = 1, for a model with per_piece
//             0, and for a group whose traffic crosses a network link, unit.network_bytes > 0).
//   A_c       attention_seconds * split_count(q, C, c) / q: the caller's attention seconds for the whole layer on
//             one rank, times the busiest position's share of it in chunk c (q = max_head_chunks, its query heads).
//
// The two exchanges beside one attention step share the links, so their times add; every chunk pays alpha(K) once
// per direction. T(1) = S_0 + A + G_0 is the layer without chunks. The choice is the C in 1..max_head_chunks with
// the least T(C) (the smallest C on ties), or 1 where that gains less than kMinHeadChunkGain over T(1), that is
// where T(C) > (1 - kMinHeadChunkGain) * T(1).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/cost_model.h"
#include "plan/exchange.h"
#include "plan/traffic.h"

namespace basp::plan {

// The least relative gain over one chunk for which more chunks are chosen.
constexpr double kMinHeadChunkGain = 0.05;

struct HeadChunkChoice {
  int32_t count = 1;              // the chosen C
  std::vector<double> predicted;  // predicted[C - 1]: T(C) in seconds, for C = 1..max_head_chunks
};

// T(C) from the per-chunk seconds of the scatter, the attention and the gather (C = their common size, >= 1).
// Throws INVALID_ARGUMENT when the sizes differ or are 0.
double pipelined_seconds(const std::vector<double>& scatter, const std::vector<double>& attention,
                         const std::vector<double>& gather);

// The choice for a layer of `tokens` tokens per sequence (THD: of the stream). Throws INVALID_ARGUMENT naming the
// value when the plans' group sizes or maximum chunk counts differ, when tokens < 0, when attention_seconds or a
// field of `unit` is negative or not finite, or when `model` fails check_cost_model.
HeadChunkChoice choose_head_chunks(const ExchangePlan& scatter, const ExchangePlan& gather, int64_t tokens,
                                   const CostModel& model, const GroupTraffic& unit, double attention_seconds);

}  // namespace basp::plan
