// basp_gather_perf: the head gather after attention: the attention output O (--pass fwd, the default), dQ, dK and
// dV in one exchange (--pass bwd: the gather that sums replicated KV heads), or both.
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  using namespace basp::bench;
  std::vector<Exchange> out;
  if (o.pass != Pass::kBackward) out.push_back(forward_gather(o));
  if (o.pass != Pass::kForward) out.push_back(backward_gather(o));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_gather_perf", "head gather after attention", &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
