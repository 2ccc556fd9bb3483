// NVTX ranges (the CUDA toolkit's header-only nvtx3) around the steps of an execute, for Nsight Systems and any
// other NVTX tool: "basp:scatter" / "basp:gather" around a whole execute on every backend, and inside an NCCL
// execute "basp:pack", "basp:exchange" and "basp:unpack". They are host-side ranges: on NCCL they bracket the
// enqueue of each step on the stream, not its run on the device. Without a tool attached (NVTX_INJECTION64_PATH
// unset) a range costs an indirect call to an empty function; a build without the CUDA toolkit has none.
#pragma once

#include "basp/config.h"

#if BASP_HAVE_CUDA && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define BASP_HAVE_NVTX 1
#endif
#endif

namespace basp::detail {

// Pushes `name` (a string literal) for the scope.
class TraceRange {
 public:
  explicit TraceRange(const char* name) {
#ifdef BASP_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~TraceRange() {
#ifdef BASP_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace basp::detail
