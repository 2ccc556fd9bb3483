#include "transport/transport.h"

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

}  // namespace basp::transport
