#include "transport/mpi/workspace.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/keep_forever.h"

namespace basp::transport::mpi {

Workspace::~Workspace() {
  if (pinned_) {
    // A late peer may still read it (a send MPI could not take back, a cma peer past its timeout): kept for the
    // process's life.
    detail::keep_forever(std::shared_ptr<std::byte>(data_, [](std::byte* p) { std::free(p); }));
    return;
  }
  std::free(data_);
}

void Workspace::reserve(int64_t bytes) {
  if (bytes <= bytes_) return;
  BASP_CHECK(!pinned_, BASP_ERROR_COMM_BROKEN, what_,
             " is still held by a send that an earlier failed exchange left behind");
  const auto rounded = static_cast<size_t>((bytes + 4095) / 4096 * 4096);
  auto* fresh = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (fresh == nullptr) detail::fail(BASP_ERROR_OUT_OF_MEMORY, what_, " of ", bytes, " bytes");
  if (data_ != nullptr) std::memcpy(fresh, data_, static_cast<size_t>(bytes_));
  // Fault the pages in now, not in the first execute.
  std::memset(fresh + bytes_, 0, rounded - static_cast<size_t>(bytes_));
  std::free(data_);
  data_ = fresh;
  bytes_ = static_cast<int64_t>(rounded);
}

}  // namespace basp::transport::mpi
