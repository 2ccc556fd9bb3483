// basp_gather_perf: the head gather after attention, for the attention output O.
#include "perf_op.h"

namespace {

std::vector<basp::bench::Exchange> exchanges(const basp::bench::PerfOptions& o) {
  return {{basp::bench::Direction::kGather, {o.heads}}};
}

}  // namespace

int main(int argc, char** argv) {
  const basp::bench::PerfOp op{"basp_gather_perf", "head gather of the attention output O",
                               "the O output (sequence-sharded)", &exchanges};
  return basp::bench::perf_main(argc, argv, op);
}
