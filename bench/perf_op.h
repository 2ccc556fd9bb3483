// What a perf binary measures, as data for the shared driver (nccl-tests' testColl): the exchanges one
// iteration runs. Each operation is a few lines in its own op_*.cpp; the driver (perf_driver.cpp) does the rest.
#pragma once

#include <cstdint>
#include <vector>

#include "perf_args.h"

namespace basp::bench {

enum class Direction { kScatter, kGather };

// One basp_scatter or basp_gather call: one plan over tensors with these head counts (Q, K, V: {Hq, Hkv, Hkv}).
struct Exchange {
  Direction direction;
  std::vector<int64_t> heads;
};

struct PerfOp {
  const char* program;       // "basp_alltoall_perf"
  const char* description;   // one line for the output's header
  const char* size_meaning;  // which tensors "size" counts, for the header
  std::vector<Exchange> (*exchanges)(const PerfOptions& options);
};

// The whole program: MPI_Init, parse, sweep, print, MPI_Finalize. Returns the process exit code:
// 0 all good, 1 a check found wrong values, 2 a bad command line, 3 a failure while running.
int perf_main(int argc, char** argv, const PerfOp& op);

}  // namespace basp::bench
