#include "transport/mpi/cma.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace basp::transport::mpi {

void CmaChannel::begin(pid_t pid, int peer, bool write) {
  pid_ = pid;
  peer_ = peer;
  write_ = write;
  nlocal_ = nremote_ = queued_ = 0;
}

void CmaChannel::add(std::byte* local, uintptr_t remote, size_t bytes) {
  // The kernel moves at most MAX_RW_COUNT (about 2 GiB) per call and reports a short copy beyond it: a system call
  // never queues more than max_call_bytes_.
  while (bytes > max_call_bytes_ - queued_) {
    const size_t part = max_call_bytes_ - queued_;
    add(local, remote, part);
    flush();
    local += part;
    remote += part;
    bytes -= part;
  }
  if (bytes == 0) return;
  const bool merge_local =
      nlocal_ > 0 && static_cast<std::byte*>(local_[nlocal_ - 1].iov_base) + local_[nlocal_ - 1].iov_len == local;
  const bool merge_remote =
      nremote_ > 0 &&
      reinterpret_cast<uintptr_t>(remote_[nremote_ - 1].iov_base) + remote_[nremote_ - 1].iov_len == remote;
  if ((!merge_local && nlocal_ == kMaxIov) || (!merge_remote && nremote_ == kMaxIov)) {
    flush();
    add(local, remote, bytes);
    return;
  }
  if (merge_local) {
    local_[nlocal_ - 1].iov_len += bytes;
  } else {
    local_[nlocal_++] = iovec{local, bytes};
  }
  if (merge_remote) {
    remote_[nremote_ - 1].iov_len += bytes;
  } else {
    remote_[nremote_++] = iovec{reinterpret_cast<void*>(remote), bytes};
  }
  queued_ += bytes;
}

void CmaChannel::flush() {
  if (queued_ == 0) return;
  ++calls_;
  const ssize_t got = write_ ? process_vm_writev(pid_, local_.data(), nlocal_, remote_.data(), nremote_, 0)
                             : process_vm_readv(pid_, local_.data(), nlocal_, remote_.data(), nremote_, 0);
  if (got != static_cast<ssize_t>(queued_)) {
    const int err = got < 0 ? errno : 0;
    detail::fail(BASP_ERROR_MPI, "intra-node ",
                 write_ ? "write (process_vm_writev) to" : "read (process_vm_readv) from", " group rank ", peer_,
                 " (pid ", pid_, ") copied ", got, " of ", queued_, " bytes", err ? ": " : "",
                 err ? std::strerror(err) : "", " (does that rank's buffer hold the plan's tensor size?)");
  }
  nlocal_ = nremote_ = queued_ = 0;
}

bool cma_probe(pid_t pid, uintptr_t address, uint64_t expect) {
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(address), sizeof(value)};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof(value)) && value == expect;
}

}  // namespace basp::transport::mpi
