#include "transport/transport.h"

#include <string>
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

GroupSpec world_spec(const GroupSpec& spec) {
  GroupSpec all;
  all.index = 0;
  all.position = spec.world_rank;
  for (int32_t r = 0; r < spec.world_size; ++r) all.members.push_back(r);
  all.where = "the comm's world (" + std::to_string(spec.world_size) + " ranks)";
  all.timeout_ms = spec.timeout_ms;
  all.world_rank = spec.world_rank;
  all.world_size = spec.world_size;
  return all;
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

std::unique_ptr<BatchTransport::Buffer> BatchTransport::buffer(int64_t bytes) {
  return std::make_unique<HostBuffer>(bytes);
}

}  // namespace basp::transport
