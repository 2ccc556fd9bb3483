#include "transport/mpi/mpi_collectives.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/keep_forever.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/mpi_wait.h"

namespace basp::transport::mpi {
namespace {

// Buffers of one non-blocking collective. On timeout they are kept forever: the abandoned operation may still
// write them whenever a late rank joins.
struct Buffers {
  std::vector<std::byte> in;
  std::vector<std::byte> out;
};

void complete(const CollectiveScope& scope, MPI_Request* request, std::unique_ptr<Buffers>& buffers, const char* step,
              const detail::Deadline& deadline) {
  WaitLabel label;
  label.where = &scope.where;
  try {
    wait_all(request, 1, Requests::kCollective, deadline, step, label);
  } catch (const detail::Error& e) {
    if (e.status() == BASP_ERROR_TIMEOUT) {
      detail::keep_forever(std::shared_ptr<Buffers>(std::move(buffers)));  // see above
      if (scope.abandoned) *scope.abandoned = true;
    }
    throw;
  }
}

}  // namespace

void allgather_bytes(const CollectiveScope& scope, const void* mine, size_t bytes, void* out, const char* step,
                     const detail::Deadline& deadline) {
  int size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(scope.comm, &size));
  BASP_CHECK(bytes <= static_cast<size_t>(INT32_MAX), BASP_ERROR_INTERNAL, "allgather of ", bytes, " bytes");
  auto buffers = std::make_unique<Buffers>();
  buffers->in.resize(bytes);
  buffers->out.resize(bytes * static_cast<size_t>(size));
  if (bytes > 0) std::memcpy(buffers->in.data(), mine, bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  BASP_MPI_CHECK(MPI_Iallgather(buffers->in.data(), static_cast<int>(bytes), MPI_BYTE, buffers->out.data(),
                                static_cast<int>(bytes), MPI_BYTE, scope.comm, &request));
  complete(scope, &request, buffers, step, deadline);
  if (!buffers->out.empty()) std::memcpy(out, buffers->out.data(), buffers->out.size());
}

void allreduce_min(const CollectiveScope& scope, int64_t* values, int n, const char* step,
                   const detail::Deadline& deadline) {
  const size_t bytes = sizeof(int64_t) * static_cast<size_t>(n);
  auto buffers = std::make_unique<Buffers>();
  buffers->in.resize(bytes);
  buffers->out.resize(bytes);
  std::memcpy(buffers->in.data(), values, bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  BASP_MPI_CHECK(
      MPI_Iallreduce(buffers->in.data(), buffers->out.data(), n, MPI_INT64_T, MPI_MIN, scope.comm, &request));
  complete(scope, &request, buffers, step, deadline);
  std::memcpy(values, buffers->out.data(), bytes);
}

}  // namespace basp::transport::mpi
