#include "transport/transport.h"

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace basp::transport {

void* GroupTransport::alloc_shared(size_t bytes) {
  (void)bytes;
  detail::fail(BASP_ERROR_UNSUPPORTED, "this backend has no shared memory (only BASP_BACKEND_MPI has)");
}

void GroupTransport::free_shared(void* ptr) {
  (void)ptr;
  detail::fail(BASP_ERROR_UNSUPPORTED, "this backend has no shared memory (only BASP_BACKEND_MPI has)");
}

basp_status_t GroupTransport::async_error(std::string& message) {
  (void)message;
  return BASP_SUCCESS;
}

GroupSpec make_group_spec(int32_t index, int32_t position, std::vector<int32_t> members, std::string where,
                          int32_t world_size, int64_t timeout_ms) {
  BASP_CHECK(position >= 0 && static_cast<size_t>(position) < members.size(), BASP_ERROR_INTERNAL, "position ",
             position, " is outside ", where);
  GroupSpec spec;
  spec.index = index;
  spec.position = position;
  spec.world_rank = members[static_cast<size_t>(position)];
  spec.members = std::move(members);
  spec.where = std::move(where);
  spec.timeout_ms = timeout_ms;
  spec.world_size = world_size;
  return spec;
}

GroupSpec world_spec(const GroupSpec& spec) {
  std::vector<int32_t> all(static_cast<size_t>(spec.world_size));
  for (int32_t r = 0; r < spec.world_size; ++r) all[static_cast<size_t>(r)] = r;
  return make_group_spec(0, spec.world_rank, std::move(all),
                         "the comm's world (" + std::to_string(spec.world_size) + " ranks)", spec.world_size,
                         spec.timeout_ms);
}

namespace {

class HostBuffer final : public BatchTransport::Buffer {
 public:
  explicit HostBuffer(int64_t bytes) : bytes_(static_cast<size_t>(bytes > 0 ? bytes : 1)) {}
  void* get() override { return bytes_.data(); }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace

void PlanExecutor::check_split_phase() const {
  detail::fail(BASP_ERROR_UNSUPPORTED, "the ", needs().backend,
               " backend runs no split-phase head chunks yet (basp_scatter_start, basp_gather_start)");
}

std::unique_ptr<BatchTransport::Buffer> BatchTransport::buffer(int64_t bytes) {
  return std::make_unique<HostBuffer>(bytes);
}

}  // namespace basp::transport
