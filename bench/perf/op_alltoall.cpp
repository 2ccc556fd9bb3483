// basp_alltoall_perf: the all-to-alls of one attention layer, in order: forward (--pass fwd, the default), the
// head scatter of Q, K and V (one exchange) and the head gather of the attention output O; backward (--pass bwd),
// the head scatter of dO and the head gather of dQ, dK and dV; or both passes (--pass both).
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  using namespace basp::bench;
  std::vector<Exchange> out;
  if (o.pass != Pass::kBackward) out = {forward_scatter(o), forward_gather(o)};
  if (o.pass != Pass::kForward) {
    out.push_back(backward_scatter(o));
    out.push_back(backward_gather(o));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_alltoall_perf", "round trip of one attention layer's head scatters and gathers",
                               &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
