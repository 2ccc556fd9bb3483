// How X items are split over K positions, as torch.tensor_split and numpy.array_split do: position j holds
// [split_begin(X, K, j), split_begin(X, K, j + 1)), the first X mod K positions one item more than the others. The
// tokens of a sequence (or of a group's packed stream) and the query heads of a tensor are split this way
// (docs/design.md, "Uneven shapes"). Host and device.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace basp::detail {

BASP_HOST_DEVICE int64_t split_begin(int64_t items, int64_t parts, int64_t j) {
  const int64_t q = items / parts;
  const int64_t r = items % parts;
  return j * q + (j < r ? j : r);
}

BASP_HOST_DEVICE int64_t split_count(int64_t items, int64_t parts, int64_t j) {
  return items / parts + (j < items % parts ? 1 : 0);
}

// The position holding item i (0 <= i < items): the inverse of split_begin.
BASP_HOST_DEVICE int64_t split_position(int64_t items, int64_t parts, int64_t i) {
  const int64_t q = items / parts;
  const int64_t r = items % parts;
  const int64_t big = r * (q + 1);  // items held by the first r positions
  return i < big ? i / (q + 1) : r + (i - big) / q;
}

}  // namespace basp::detail
