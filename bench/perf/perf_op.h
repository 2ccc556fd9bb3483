// What a perf binary measures, as data for the shared driver (nccl-tests' testColl): the exchanges one
// iteration runs. Each operation is a few lines in its own op_*.cpp; the driver (perf_driver.cpp) does the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perf_args.h"

namespace basp::bench {

enum class Direction { kScatter, kGather };

// One tensor of an exchange: its heads, for a key/value tensor the query heads whose split it follows
// (basp_plan_desc_t.query_heads; 0: query-like, its heads follow their own split), and its head size
// (basp_plan_desc_t.head_dims: 0 for the run's --head-dim).
struct Tensor {
  std::string name;  // "Q", "dK": for the header
  int64_t heads = 0;
  int64_t query_heads = 0;
  int64_t head_dim = 0;
};

// The head size of `t` in a run whose --head-dim is `head_dim`.
inline int64_t tensor_head_dim(const Tensor& t, int64_t head_dim) { return t.head_dim > 0 ? t.head_dim : head_dim; }

// One basp_scatter or basp_gather call: one plan over these tensors.
struct Exchange {
  Direction direction;
  std::vector<Tensor> tensors;
};

// The head size --head-dims gives Q (0), K (1) or V (2); 0 (the run's --head-dim) without --head-dims.
inline int64_t qkv_head_dim(const PerfOptions& o, size_t which) {
  return o.head_dims.size() == 3 ? o.head_dims[which] : 0;
}

// The exchanges of one attention layer. Forward: scatter Q, K, V (one exchange), gather O. Backward: scatter dO,
// gather dQ, dK, dV (the gather that sums a KV head's gradient over the ranks holding it). O and dO have V's head
// size (attention's output is a weighted sum of V's rows), dQ, dK, dV those of Q, K, V.
inline Exchange forward_scatter(const PerfOptions& o) {
  return {Direction::kScatter,
          {{"Q", o.heads, 0, qkv_head_dim(o, 0)},
           {"K", o.kv_heads, o.heads, qkv_head_dim(o, 1)},
           {"V", o.kv_heads, o.heads, qkv_head_dim(o, 2)}}};
}
inline Exchange forward_gather(const PerfOptions& o) {
  return {Direction::kGather, {{"O", o.heads, 0, qkv_head_dim(o, 2)}}};
}
inline Exchange backward_scatter(const PerfOptions& o) {
  return {Direction::kScatter, {{"dO", o.heads, 0, qkv_head_dim(o, 2)}}};
}
inline Exchange backward_gather(const PerfOptions& o) {
  return {Direction::kGather,
          {{"dQ", o.heads, 0, qkv_head_dim(o, 0)},
           {"dK", o.kv_heads, o.heads, qkv_head_dim(o, 1)},
           {"dV", o.kv_heads, o.heads, qkv_head_dim(o, 2)}}};
}

// "scatter Q(32) K(8) V(8); gather O(32)": the header's description of an iteration; a tensor with its own head
// size shows it: "Q(16 x 192)".
std::string describe_exchanges(const std::vector<Exchange>& exchanges);
// "Q, K, V and O": the tensors whose sequence-sharded bytes "size" counts.
std::string size_meaning(const std::vector<Exchange>& exchanges);

struct PerfOp {
  const char* program;      // "basp_alltoall_perf"
  const char* description;  // one line for the output's header
  std::vector<Exchange> (*exchanges)(const PerfOptions& options);
};

// The whole program: MPI_Init, parse, sweep, print, MPI_Finalize. Returns the process exit code:
// 0 all good, 1 a check found wrong values, 2 a bad command line, 3 a failure while running.
int perf_main(int argc, char** argv, const PerfOp& op);

}  // namespace basp::bench
