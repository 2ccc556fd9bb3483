// Host memory that the ranks of one node's group map into each other's address space (the host analogue of
// NCCL's symmetric memory: ncclMemAlloc + window registration). A tensor that lives in it can be reached by
// its peers with plain loads and stores, so the MPI backend moves its rows with one user-space copy: no
// packing, no system call per row.
//
// Allocation and release are collective over the group. Every rank ends up with the same table of regions (one
// per rank and allocation), so every rank can tell, from the addresses its peers publish, whether an exchange
// can take the shared-memory path, and all reach the same answer without talking.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "transport/mpi/mpi_collectives.h"

namespace basp::transport::mpi {

class SharedMemory {
 public:
  SharedMemory() = default;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  // Collective over `group.comm` (this rank at `position`), after the group's consistency check: `bytes` of
  // zeroed host memory for this rank. When the group spans nodes or the kernel refuses the mapping, the memory is
  // ordinary private memory (still valid, just not shared) and `shared` says so. Its collectives are bounded by
  // `deadline`.
  // `call` names the call in messages ("basp_mem_alloc", "basp_plan_create").
  void* allocate(const CollectiveScope& group, int position, size_t bytes, bool* shared,
                 const detail::Deadline& deadline, const char* call);
  // Collective: every rank passes the pointer it got from the same allocate call. Throws (on every rank) when
  // some rank passes a pointer that allocate did not return. Must not run while an exchange reads the table.
  void release(const CollectiveScope& group, int position, void* ptr, const detail::Deadline& deadline,
               const char* call);

  // This process's address of [address, address + bytes) in the memory of the rank at `owner`, or nullptr
  // when that range is not inside one shared region. Lock-free and allocation-free: the exchanges call it per
  // tensor and peer while another thread may be allocating.
  std::byte* translate(int owner, uint64_t address, uint64_t bytes) const;
  // This process's address of the first shared region that the rank at `owner` allocated, or nullptr.
  std::byte* first_region_of(int owner) const;

 private:
  // Regions form a list that only grows (newest first) and is freed with the table: readers walk it without a
  // lock; release() unmaps a region and marks it dead.
  struct Region {
    int owner = -1;     // position of the rank that allocated it
    uint64_t base = 0;  // its address in the owner's process
    uint64_t size = 0;
    std::byte* mapped = nullptr;  // its address in this process
    int fd = -1;                  // the memfd, for regions this rank owns
    uint64_t id = 0;              // allocation number, the same on every rank
    bool shared = false;          // false: this rank's private memory (the group could not share it)
    std::atomic<bool> live{true};
    Region* next = nullptr;
  };
  static void unmap(Region& r);
  void publish(std::unique_ptr<Region> region);
  // The steps of allocate (shared_memory.cpp).
  // This rank's part, mapped: a memfd when the group is on one node (`have_fd` says it worked), else anonymous
  // memory. A failed mapping fails on every rank of the group.
  static std::unique_ptr<Region> map_own(const CollectiveScope& group, int position, int k, size_t bytes, bool one_node,
                                         bool* have_fd, const detail::Deadline& deadline, const char* call);
  // The region of the part of the rank at `owner`, mapped at `mapped` in this process.
  static std::unique_ptr<Region> peer_region(int owner, uint64_t base, uint64_t size, void* mapped);
  // Whether every rank mapped every part (ok: this rank did); unmaps this rank's regions when the check fails.
  static bool agree_on_mapping(const CollectiveScope& group, int ok, Region& mine,
                               std::vector<std::unique_ptr<Region>>& peers, const detail::Deadline& deadline,
                               const char* call);
  // Numbers the allocation and publishes this rank's region and, when every rank mapped every part, its peers'.
  void publish_allocation(std::unique_ptr<Region> mine, std::vector<std::unique_ptr<Region>> peers, bool all_ok);

  std::mutex writers_;  // allocate and release, one at a time
  std::atomic<Region*> head_{nullptr};
  uint64_t next_id_ = 0;
};

}  // namespace basp::transport::mpi
