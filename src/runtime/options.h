// A comm's options: the caller's basp_comm_config_v1 after validation, the one place that checks it.
#pragma once

#include <cstdint>

#include "basp/basp.h"

namespace basp::runtime {

struct CommOptions {
  int64_t micro_batch = 0;
  int32_t num_groups = -1;
  basp_backend_t backend = BASP_BACKEND_MPI;
  basp_placement_t placement = BASP_PLACEMENT_DEFAULT;
  int64_t timeout_ms = BASP_DEFAULT_TIMEOUT_MS;  // resolved (runtime/timeout.h); 0: no timeout
  int64_t batch_capacity = 0;                    // > 0: batch plans of at most this many tokens per rank
  bool batch_only() const { return micro_batch == 0; }
  // The B the comm's own groups are formed for: a comm of batch plans only has N groups of one rank.
  int64_t layout_micro_batch(int32_t world_size) const { return batch_only() ? world_size : micro_batch; }
};

// Checks every field of `config`; the error names the field and its value. Needs no other rank: whether G divides
// N is checked when the groups are formed.
CommOptions comm_options(const basp_comm_config_v1& config);

// The timeout a rank uses while it takes part in a creation whose config it could not use (`config` NULL when
// unreadable): its own when that field is valid, else the environment's or the default, so that it still fails
// in step with the others.
int64_t fallback_timeout_ms(const basp_comm_config_v1* config);

}  // namespace basp::runtime
