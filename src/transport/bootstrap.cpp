#include "transport/bootstrap.h"

namespace basp::transport {

std::vector<int32_t> identity_members(int32_t size) {
  std::vector<int32_t> members(static_cast<size_t>(size));
  for (int32_t r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
  return members;
}

std::string parent_where(const std::string& kind, int32_t size) {
  return "the " + kind + " (" + std::to_string(size) + (size == 1 ? " rank)" : " ranks)");
}

}  // namespace basp::transport
