// basp_alltoall_perf: the all-to-alls of one attention layer's forward pass, in order: the head scatter of
// Q, K and V (one exchange) and the head gather of the attention output O.
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  using basp::bench::Direction;
  return {{Direction::kScatter, {o.heads, o.kv_heads, o.kv_heads}}, {Direction::kGather, {o.heads}}};
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_alltoall_perf",
                               "round trip of one attention layer: head scatter of Q, K, V, then head gather of O",
                               "Q, K, V and O (sequence-sharded)", &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
