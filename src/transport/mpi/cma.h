// Single-copy transfers with another process of the same node (Linux cross-memory attach:
// process_vm_readv / process_vm_writev). The MPI backend uses them to move rows straight from one rank's
// tensor into another's: one copy per byte, the same as a bare MPI_Alltoall over shared memory, instead of
// pack + send. The kernel pins the *remote* pages range by range, which costs per range; local ranges are
// cheap. So the remote side is always the head-sharded tensor, where a peer's rows form a few large blocks.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace basp::transport::mpi {

// Batches (local, remote) byte ranges into as few system calls as possible, merging ranges that are contiguous
// on each side. Holds no heap memory: the iovec arrays are members.
class CmaChannel {
 public:
  static constexpr size_t kMaxIov = 1024;                   // IOV_MAX on Linux
  static constexpr size_t kMaxCallBytes = size_t{1} << 30;  // per system call, below the kernel's MAX_RW_COUNT

  // `max_call_bytes`: at most this many bytes per system call (tests make it small).
  explicit CmaChannel(size_t max_call_bytes = kMaxCallBytes) : max_call_bytes_(max_call_bytes) {}

  // Starts a series of reads from (write = false) or writes to (write = true) process `pid`; `peer` names it
  // in error messages.
  void begin(pid_t pid, int peer, bool write);
  void add(std::byte* local, uintptr_t remote, size_t bytes);
  // Issues what is queued; throws BASP_ERROR_MPI naming the peer on failure.
  void flush();
  // System calls made so far (tests).
  size_t calls() const { return calls_; }

 private:
  pid_t pid_ = 0;
  int peer_ = -1;
  bool write_ = false;
  size_t nlocal_ = 0;
  size_t nremote_ = 0;
  size_t queued_ = 0;
  size_t max_call_bytes_ = kMaxCallBytes;
  size_t calls_ = 0;
  std::array<iovec, kMaxIov> local_{};
  std::array<iovec, kMaxIov> remote_{};
};

// True when this process can read `address` (holding `expect`) in process `pid` with process_vm_readv.
bool cma_probe(pid_t pid, uintptr_t address, uint64_t expect);

}  // namespace basp::transport::mpi
