// Host-side collectives over a fixed set of ranks: what comm creation needs from a parent (an MPI communicator, a
// parent NCCL communicator or the caller's out-of-band callbacks) and what the consistency checks of plan creation
// and basp_mem_alloc need from a group. One operation: an all-gather of bytes, bounded by a deadline.
//
// After a timeout the all-gather is abandoned (no backend can take one back): its buffers are kept alive, and the
// bootstrap must not be used for collectives again (the runtime breaks the comm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/deadline.h"

namespace basp::transport {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  // The world rank of each rank of this bootstrap (GroupSpec::members): how messages call it.
  virtual const std::vector<int32_t>& members() const = 0;
  // "the parent communicator (4 ranks)", "group 1 (world ranks 4..7)".
  virtual const std::string& where() const = 0;
  // Every rank's `bytes` bytes from `send` into `recv` (size() * bytes, in rank order). Throws
  // BASP_ERROR_TIMEOUT naming `step` and where() when a rank does not join by `deadline`, or the backend's error.
  virtual void allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                         const detail::Deadline& deadline) = 0;
};

// Every rank's fixed-size, trivially copyable record, by rank: one all-gather of its bytes.
template <typename Record>
std::vector<Record> allgather_records(Bootstrap& bootstrap, const Record& mine, const std::string& step,
                                      const detail::Deadline& deadline) {
  static_assert(std::is_trivially_copyable_v<Record>, "a record travels as bytes");
  std::vector<Record> all(static_cast<size_t>(bootstrap.size()));
  bootstrap.allgather(&mine, sizeof(Record), all.data(), step, deadline);
  return all;
}

// members() of a parent: rank r is world rank r.
std::vector<int32_t> identity_members(int32_t size);
// where() of a parent: "the <kind> (<size> ranks)".
std::string parent_where(const std::string& kind, int32_t size);

}  // namespace basp::transport
