// basp_scatter_perf: the head scatter before attention: Q, K and V in one exchange (--pass fwd, the default), dO
// (--pass bwd), or both.
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  using namespace basp::bench;
  std::vector<Exchange> out;
  if (o.pass != Pass::kBackward) out.push_back(forward_scatter(o));
  if (o.pass != Pass::kForward) out.push_back(backward_scatter(o));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_scatter_perf", "head scatter before attention", &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
