#include "runtime/options.h"

#include "common/error.h"
#include "runtime/timeout.h"

namespace basp::runtime {

CommOptions comm_options(const basp_comm_config_v1& c) {
  BASP_CHECK_ARG(c.batch_capacity >= 0, "config->batch_capacity (", c.batch_capacity,
                 ") must be 0 (no batch plans) or a positive token count");
  BASP_CHECK_ARG(c.micro_batch > 0 || (c.micro_batch == 0 && c.batch_capacity > 0), "config->micro_batch (",
                 c.micro_batch, ") must be positive, or 0 for a comm of batch plans only (with batch_capacity > 0)");
  BASP_CHECK_ARG(c.micro_batch > 0 || c.num_groups == -1, "config->num_groups (", c.num_groups,
                 ") must be -1 in a comm of batch plans only (micro_batch 0)");
  BASP_CHECK_ARG(c.num_groups == -1 || c.num_groups > 0, "config->num_groups (", c.num_groups,
                 ") must be positive or -1 (gcd rule)");
  BASP_CHECK_ARG(c.backend >= 0 && c.backend < BASP_BACKEND_COUNT, "config->backend (", c.backend,
                 ") is not a basp_backend_t value (0..", BASP_BACKEND_COUNT - 1, ")");
  BASP_CHECK_ARG(c.placement >= 0 && c.placement < BASP_PLACEMENT_COUNT, "config->placement (", c.placement,
                 ") is not a basp_placement_t value (0..", BASP_PLACEMENT_COUNT - 1, ")");
  BASP_CHECK_ARG(c.reserved0 == 0, "config->reserved0 (", c.reserved0, ") must be 0");
  CommOptions o;
  o.micro_batch = c.micro_batch;
  o.num_groups = c.num_groups;
  o.backend = static_cast<basp_backend_t>(c.backend);
  o.placement = static_cast<basp_placement_t>(c.placement);
  o.timeout_ms = resolve_timeout_ms(c.timeout_ms);
  o.batch_capacity = c.batch_capacity;
  return o;
}

int64_t fallback_timeout_ms(const basp_comm_config_v1* config) {
  try {
    return resolve_timeout_ms(config != nullptr ? config->timeout_ms : -1);
  } catch (const detail::Error&) {
    return BASP_DEFAULT_TIMEOUT_MS;
  }
}

}  // namespace basp::runtime
