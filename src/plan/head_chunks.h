// Head chunks: an exchange cut into C pieces along the query heads, so that attention on one piece can overlap the
// exchange of its neighbours (docs/design.md, "Head chunks"). Pure arithmetic on an ExchangePlan, independent of the
// tensors' memory layout. The MPI backend executes one chunk at a time (ExchangePlan::call).
//
// Head chunk c of C is a range of EACH position's split heads (a tensor's query heads, or its own heads for a
// query-like tensor): position j's split heads [a_j, a_j + n_j) cut into C contiguous ranges by tensor_split's rule
// (common/split.h),
//     chunk c of position j = [a_j + split_begin(n_j, C, c), a_j + split_begin(n_j, C, c + 1)).
// The plan's chunk basis is the largest split_heads over its tensors (Hq for an attention plan whose key/value
// tensors carry query_heads): the query heads the chunks stand for. C is at most the busiest position's split heads
// of it, ceil(basis / K) (max_head_chunks); a position with fewer split heads than C has empty chunks, the last
// ones, which still take part: they move nothing.
//
// What a chunk moves, per tensor and position j (the position on the head-sharded side):
//   - a query-like tensor (split_heads == heads) of the basis' head count: chunk c's heads of j, in both directions;
//   - a key/value tensor (ratio r = split_heads / heads; its head h is read by query heads [h*r, (h+1)*r)): a head
//     j holds moves to j in the scatter with the FIRST chunk of j whose query heads read it, and comes back from j
//     in the gather with the LAST one (j's own contribution, summed at its destination as a whole gather sums the
//     contributions of a head's holders);
//   - a query-like tensor with fewer heads than the basis (say K and V planned with query_heads 0 where Hkv < Hq):
//     which query heads read its heads is unknown here, so every head of j moves in the scatter's FIRST chunk (0)
//     and the gather's LAST (C - 1), none in the others (layout::Geometry::kChunkAtEnds, set by the plan). Right
//     for any reader, but such a tensor does not overlap attention: to pipeline K and V, plan them with
//     query_heads = Hq.
// So for every chunk c and position j: every head chunk c of j reads has arrived by the end of scatter chunk c; a
// head j sends in gather chunk c is read by no later chunk of j (its gradient on j is complete once attention on
// chunk c is); over the C chunks every (tensor, head, holder) moves exactly once per direction, and the chunks'
// bytes add up to the whole exchange's. The heads one chunk moves to or from one position are contiguous.
//
// Chunk c is K ranges, one inside each position's split heads; for K > 1 and C > 1 they are not one contiguous
// range of the group's heads (position 0's later chunks lie between its chunk c and position 1's). Chunk 0 of 1 is
// the whole exchange. The struct (HeadChunk) is in exchange.h, which executes it (ExchangePlan::call); the moved
// heads are layout::Geometry::moved, which the copies of an execute follow.
//
// Names: a "chunk" of geometry.h is what sequence position s exchanges with head position h in a whole exchange;
// within head chunk c, s and h exchange the part of that chunk which carries head chunk c's heads.
#pragma once

#include <cstdint>

#include "common/direction.h"
#include "plan/exchange.h"

namespace basp::plan {

// Heads [begin, end) of one tensor, in its own numbering (0..num_heads-1; query heads for split_heads()).
using HeadSpan = layout::HeadSpan;

// The most head chunks the plan takes: the busiest position's split heads of the chunk basis, ceil(basis / K)
// (ceil(Hq / K) for an attention plan whose tensors follow Hq query heads).
int32_t max_head_chunks(const ExchangePlan& plan);

// Throws INVALID_ARGUMENT naming the value: a count below 1, a count above max_head_chunks(plan) (naming it), an
// index outside 0..count-1.
void check_head_chunk(const ExchangePlan& plan, HeadChunk chunk);

// Tensor t's split heads of position j in `chunk` (query heads for a key/value tensor): the range the rule cuts,
// which a query-like tensor below the basis does not follow (chunk_heads says what it moves).
HeadSpan chunk_split_heads(const ExchangePlan& plan, int32_t t, int32_t j, HeadChunk chunk);

// Tensor t's heads that `chunk` moves to position j in a scatter, or from position j in a gather (each sequence
// position exchanges these heads of its tokens with j). Empty where the chunk moves none of j's heads.
HeadSpan chunk_heads(const ExchangePlan& plan, int32_t t, int32_t j, HeadChunk chunk, Direction direction);

// Bytes of tensor t that position `from` sends position `to` in `chunk` of an exchange in `direction` of `tokens`
// tokens per sequence (THD: of the stream): in a scatter `from` is the sequence side and `to` the head side, in a
// gather the other way round. from == to counts the rows a position copies to itself.
int64_t chunk_bytes(const ExchangePlan& plan, int64_t tokens, int32_t t, HeadChunk chunk, Direction direction,
                    int32_t from, int32_t to);

// The most bytes one position sends one other position in `chunk`, summed over the plan's tensors: the per-peer
// bytes of traffic.h for this chunk (0 for K = 1).
int64_t chunk_per_peer(const ExchangePlan& plan, int64_t tokens, HeadChunk chunk, Direction direction);

// The most row pieces one position sends one other position in `chunk`, summed over the plan's tensors: for each
// tensor that moves heads between them, the sequence-side position's rows (every layout is token-major, so a row's
// heads of the chunk are one contiguous piece). The pieces of cost_model.h, per peer (0 for K = 1).
int64_t chunk_pieces_per_peer(const ExchangePlan& plan, int64_t tokens, HeadChunk chunk, Direction direction);

}  // namespace basp::plan
