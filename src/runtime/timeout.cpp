#include "runtime/timeout.h"

#include "basp/basp.h"
#include "common/env.h"
#include "common/error.h"

namespace basp::runtime {

int64_t resolve_timeout_ms(int64_t configured) {
  BASP_CHECK_ARG(configured >= -1 && configured <= kMaxTimeoutMs, "config->timeout_ms (", configured,
                 ") must be -1 (BASP_TIMEOUT_MS or the default), 0 (no timeout) or 1..", kMaxTimeoutMs, " ms");
  if (configured >= 0) return configured;
  // Digits only, 0..kMaxTimeoutMs (the table's range): "5s", "-1" or "1e3" are mistakes worth naming.
  return env::get_int("BASP_TIMEOUT_MS");
}

}  // namespace basp::runtime
