// Ranks in messages: "0..2, 5, 7, 8" (increasing, runs of three or more compressed), so that an error about 512
// ranks stays one line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basp::detail {

std::string compress_ranks(std::vector<int32_t> ranks);

}  // namespace basp::detail
