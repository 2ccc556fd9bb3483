#include "runtime/timeout.h"

#include <cstdlib>
#include <string>

#include "basp/basp.h"
#include "common/error.h"

namespace basp::runtime {

int64_t resolve_timeout_ms(int64_t configured) {
  BASP_CHECK_ARG(configured >= -1 && configured <= kMaxTimeoutMs, "config->timeout_ms (", configured,
                 ") must be -1 (BASP_TIMEOUT_MS or the default), 0 (no timeout) or 1..", kMaxTimeoutMs, " ms");
  if (configured >= 0) return configured;
  const char* env = std::getenv("BASP_TIMEOUT_MS");
  if (env == nullptr || *env == '\0') return BASP_DEFAULT_TIMEOUT_MS;
  // Digits only: "5s", "-1" or "1e3" are mistakes worth naming, not values to guess at.
  int64_t value = 0;
  bool ok = true;
  for (const char* p = env; *p && ok; ++p) {
    ok = *p >= '0' && *p <= '9' && value <= kMaxTimeoutMs;
    if (ok) value = value * 10 + (*p - '0');
  }
  BASP_CHECK_ARG(ok && value <= kMaxTimeoutMs, "BASP_TIMEOUT_MS (", env, ") must be a number of milliseconds in 0..",
                 kMaxTimeoutMs, " (0: no timeout)");
  return value;
}

}  // namespace basp::runtime
