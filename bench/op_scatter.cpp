// basp_scatter_perf: the head scatter before attention, Q, K and V in one exchange.
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  return {{basp::bench::Direction::kScatter, {o.heads, o.kv_heads, o.kv_heads}}};
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_scatter_perf", "head scatter of Q, K, V in one exchange", "the Q, K and V inputs",
                               &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
