#include "transport/mpi/mpi_collectives.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "transport/mpi/keep_forever.h"
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
      keep_forever(std::shared_ptr<Buffers>(std::move(buffers)));  // see above
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

void agree(const CollectiveScope& scope, const runtime::CallRecord& mine, const detail::Deadline& deadline) {
  const char* call = runtime::call_name(static_cast<runtime::CallKind>(mine.kind));
  const uint64_t fp = runtime::fingerprint(mine);
  // MIN of {fp, ~fp} = {smallest, ~largest}; compared as signed after a flip of the top bit, which keeps order.
  constexpr uint64_t kFlip = uint64_t{1} << 63;
  int64_t round1[2] = {static_cast<int64_t>(fp ^ kFlip), static_cast<int64_t>(~fp ^ kFlip)};
  const std::string step1 = std::string("the consistency check of ") + call + " (every rank must call it)";
  allreduce_min(scope, round1, 2, step1.c_str(), deadline);
  const uint64_t smallest = static_cast<uint64_t>(round1[0]) ^ kFlip;
  const uint64_t largest = ~(static_cast<uint64_t>(round1[1]) ^ kFlip);
  if (smallest != largest) {
    int size = 0;
    BASP_MPI_CHECK(MPI_Comm_size(scope.comm, &size));
    std::vector<runtime::CallRecord> all(static_cast<size_t>(size));
    allgather_bytes(scope, &mine, sizeof(runtime::CallRecord), all.data(),
                    ("the gather of the ranks' arguments of " + std::string(call)).c_str(), deadline);
    runtime::fail_mismatch(all, scope.labels, scope.where, mine);
  }
  if (mine.local_status != BASP_SUCCESS) return;  // every rank failed its own checks alike: none goes on
  int64_t present = 1;
  const std::string step2 = std::string("the second round of the consistency check of ") + call;
  allreduce_min(scope, &present, 1, step2.c_str(), deadline);
}

}  // namespace basp::transport::mpi
