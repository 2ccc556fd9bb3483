// Bit-exact check data for the perf binaries: every element is a function of its global coordinates (tensor,
// sequence, token, head, dim), as in tests/common/pattern.h, but hashed once per element instead of once per
// byte so that checking a 64 MiB tensor takes a fraction of a second. The shapes and offsets below are plain
// formulas (tensor_split's rule, perf_shape.h), independent of the library's index math (src/layout/geometry.h).
//
// A gather of a key/value tensor whose heads several ranks hold (grouped-query attention with fewer KV heads than
// the group has ranks) sums the holders' contributions. Its inputs are small integers instead (a function of the
// coordinates and of the holder), which FP16, BF16, FP32 and FP64 represent and add exactly, so that the expected
// output, their sum, is exact too.
#pragma once

#include <cstdint>
#include <vector>

#include "basp/basp.h"
#include "perf_op.h"

namespace basp::bench {

// Which part of its group's tensors one rank holds: sequences [first_sequence, +num_sequences) of S tokens each
// (THD: one stream of T tokens, numbered by the group index), the tokens and heads split over K positions.
struct RankPlace {
  basp_layout_t layout = BASP_LAYOUT_BSHD;
  int64_t group_size = 1;  // K
  int64_t position = 0;    // l
  int64_t first_sequence = 0;
  int64_t num_sequences = 1;
  int64_t seq_len = 0;  // S; THD: the tokens T of the group's stream in this execute
};

// BSHD/SBHD: from basp_comm_query (K, l, the sequences), for S tokens per sequence.
RankPlace rank_place(const basp_rank_info_t& info, basp_layout_t layout, int64_t seq_len);
// THD: from basp_comm_assign_documents (K, l, the group; the stream's T).
RankPlace rank_place(const basp_doc_assignment_t& assignment);

// The global heads [begin, end) position j holds on the head-sharded side. A query-like tensor (query_heads 0)
// splits its own heads; a KV tensor of `heads` heads serving `query_heads` query heads (r = query_heads / heads)
// holds KV heads [a / r, (b - 1) / r] where [a, b) is the query split, none when a == b (then begin == end == 0).
struct HeadRange {
  int64_t begin = 0;
  int64_t end = 0;
};
HeadRange head_range(int64_t group_size, int64_t position, int64_t heads, int64_t query_heads);
// The most positions holding one head of the tensor (1: no head is replicated).
int64_t max_holders(int64_t group_size, int64_t heads, int64_t query_heads);

// What one rank holds of one tensor: sequences [first_sequence, +num_sequences), tokens [token_begin, +tokens),
// heads [head_begin, +heads), all of the head dim.
struct Shard {
  basp_layout_t layout = BASP_LAYOUT_BSHD;
  int64_t elem = 0;
  int64_t head_dim = 0;
  int64_t first_sequence = 0;
  int64_t num_sequences = 0;
  int64_t token_begin = 0;
  int64_t tokens = 0;
  int64_t head_begin = 0;
  int64_t heads = 0;

  int64_t elements() const { return num_sequences * tokens * heads * head_dim; }
  int64_t bytes() const { return elements() * elem; }
  // Element offset of local (sequence b, token s, head h, dim d); THD is BSHD with one sequence.
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return layout == BASP_LAYOUT_SBHD ? ((s * num_sequences + b) * heads + h) * head_dim + d
                                      : ((b * tokens + s) * heads + h) * head_dim + d;
  }
};

// The two forms of a tensor on the rank `place` describes: sequence-sharded (scatter input, gather output: its
// tokens of every head) and head-sharded (scatter output, gather input: every token of its heads).
Shard seq_shard(const RankPlace& place, int64_t elem, int64_t head_dim, int64_t heads);
Shard head_shard(const RankPlace& place, int64_t elem, int64_t head_dim, int64_t heads, int64_t query_heads);

// Bytes this rank sends to each position of its group in one scatter of `tensors` (its own position included: the
// local copy); a gather moves the same amounts the other way. Excluding the own position, their sum is the routing
// minimum, basp_plan_info_t.bytes_sent_per_exchange. A tensor's rows are of its own head size (tensor_head_dim:
// Tensor::head_dim, else `head_dim`).
std::vector<int64_t> scatter_bytes_to(const RankPlace& place, int64_t elem, int64_t head_dim,
                                      const std::vector<Tensor>& tensors);
// The bytes each position sends this rank in one scatter (what it receives), its own included.
std::vector<int64_t> scatter_bytes_from(const RankPlace& place, int64_t elem, int64_t head_dim,
                                        const std::vector<Tensor>& tensors);

constexpr uint8_t kCheckPoison = 0xA5;

// Writes the expected value of every element of `shard` of tensor `tensor_id`.
void fill_expected(const Shard& shard, uint64_t seed, int64_t tensor_id, void* data);
// Counts the elements of `data` that differ from the expected value.
int64_t count_wrong(const Shard& shard, uint64_t seed, int64_t tensor_id, const void* data);

// Whether a gather may sum this dtype (the library's rule: FP16, BF16, FP32, FP64).
bool summable(basp_dtype_t dtype);
// The bits of the integer v in `dtype` (exact for |v| <= 256), written to out (dtype's size). Throws
// std::invalid_argument for a dtype that is not summable.
void encode_small_int(basp_dtype_t dtype, int64_t v, void* out);

// One tensor of one exchange on one rank: what its input holds and what its output must hold.
struct TensorCheck {
  Shard input;
  Shard output;
  bool summed = false;  // a gather of replicated heads: small-integer inputs, their sums expected
  basp_dtype_t dtype = BASP_DTYPE_BYTE;
  int64_t group_size = 1;
  int64_t position = 0;
  int64_t heads = 0;
  int64_t query_heads = 0;
  int64_t amplitude = 0;  // summed: inputs lie in [-amplitude, amplitude)
};

// `head_dim`: the run's head size, for a tensor without its own (tensor_head_dim).
TensorCheck tensor_check(const RankPlace& place, Direction direction, basp_dtype_t dtype, int64_t head_dim,
                         const Tensor& tensor);
void fill_input(const TensorCheck& check, uint64_t seed, int64_t tensor_id, void* data);
// Elements of the output that differ from the expected value.
int64_t count_wrong_output(const TensorCheck& check, uint64_t seed, int64_t tensor_id, const void* data);

}  // namespace basp::bench
