// The direction of an exchange, from the entry points (basp_scatter, basp_gather) down to the transports' control
// messages, which carry its value (1, 2) on the wire.
#pragma once

#include <cstdint>

namespace basp {

enum class Direction : int32_t {
  kScatter = 1,  // sequence-sharded inputs -> head-sharded outputs
  kGather = 2,   // head-sharded inputs -> sequence-sharded outputs
};

// "scatter" or "gather".
inline const char* direction_name(Direction d) { return d == Direction::kScatter ? "scatter" : "gather"; }
// The entry point of the direction: "basp_scatter" or "basp_gather".
inline const char* direction_call(Direction d) { return d == Direction::kScatter ? "basp_scatter" : "basp_gather"; }

}  // namespace basp
