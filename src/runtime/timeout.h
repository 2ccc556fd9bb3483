// The comm's timeout (docs/reliability.md): how long a blocking step of a collective call waits for the other
// ranks. config->timeout_ms when set, else the environment variable BASP_TIMEOUT_MS, else
// BASP_DEFAULT_TIMEOUT_MS. 0 means wait forever.
#pragma once

#include <cstdint>

namespace basp::runtime {

constexpr int64_t kMaxTimeoutMs = int64_t{30} * 24 * 3600 * 1000;  // 30 days: far from any clock overflow

// `configured` is config->timeout_ms (-1: unset). Throws BASP_ERROR_INVALID_ARGUMENT naming the field or the
// environment variable and its value.
int64_t resolve_timeout_ms(int64_t configured);

}  // namespace basp::runtime
