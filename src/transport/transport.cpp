#include "transport/transport.h"

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
