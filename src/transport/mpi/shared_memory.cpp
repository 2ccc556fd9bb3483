#include "transport/mpi/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"
#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {
namespace {

struct Published {
  int64_t pid;
  int64_t fd;
  uint64_t base;
  uint64_t size;
  int64_t ok;  // 1: this rank's memfd is mapped and can be shared
};

// Whether all k ranks of the group are on this node; `node` receives the node's communicator.
bool group_on_one_node(const CollectiveScope& group, int k, OwnedComm& node_owned) {
  MPI_Comm node = MPI_COMM_NULL;
  // Blocking, but every rank of the group is inside this call since the consistency check.
  BASP_MPI_CHECK(MPI_Comm_split_type(group.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  node_owned = OwnedComm(node);
  int node_size = 0;
  BASP_MPI_CHECK(MPI_Comm_size(node, &node_size));
  return node_size == k;
}

// Every rank's record, this rank's `me` among them (collective over the group).
std::vector<Published> gather_published(const CollectiveScope& group, const Published& me, int k,
                                        const detail::Deadline& deadline, const char* call) {
  std::vector<Published> all(static_cast<size_t>(k));
  allgather_bytes(group, &me, sizeof(Published), all.data(),
                  (std::string("the exchange of shared memory at ") + call).c_str(), deadline);
  return all;
}

// Still collective: tells the others this rank has nothing, then fails on every rank.
[[noreturn]] void fail_everywhere(const CollectiveScope& group, int k, size_t bytes, int err,
                                  const detail::Deadline& deadline, const char* call) {
  Published none{0, -1, 0, 0, -1};
  gather_published(group, none, k, deadline, call);
  detail::fail(BASP_ERROR_OUT_OF_MEMORY, "mmap of ", bytes, " bytes failed: ", std::strerror(err));
}

// Whether some rank of the group could not map its part.
bool any_rank_failed(const std::vector<Published>& all) {
  bool any_failed = false;
  for (const Published& x : all) any_failed |= x.ok < 0;
  return any_failed;
}

// Whether every rank's part is a memfd that its peers can map.
bool all_shareable(const std::vector<Published>& all) {
  int ok = 1;
  for (const Published& x : all) ok &= x.ok == 1;
  return ok != 0;
}

// The peer's memfd mapped into this process through /proc, or MAP_FAILED.
void* map_peer(const Published& x) {
  const std::string path = "/proc/" + std::to_string(x.pid) + "/fd/" + std::to_string(x.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  void* q = fd >= 0 ? mmap(nullptr, x.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  return q;
}

}  // namespace

SharedMemory::~SharedMemory() {
  Region* r = head_.load();
  while (r != nullptr) {
    Region* next = r->next;
    if (r->live.load()) unmap(*r);
    delete r;
    r = next;
  }
}

void SharedMemory::publish(std::unique_ptr<Region> region) {
  region->next = head_.load(std::memory_order_relaxed);
  head_.store(region.release(), std::memory_order_release);  // writers hold writers_: no lost update
}

void SharedMemory::unmap(Region& r) {
  if (r.mapped) munmap(r.mapped, r.size);
  if (r.fd >= 0) close(r.fd);
  r.mapped = nullptr;
  r.fd = -1;
}

void* SharedMemory::allocate(const CollectiveScope& group, int position, size_t bytes, bool* shared,
                             const detail::Deadline& deadline, const char* call) {
  BASP_CHECK_ARG(bytes > 0, "bytes (", bytes, ") must be positive");
  int k = 0;
  BASP_MPI_CHECK(MPI_Comm_size(group.comm, &k));
  OwnedComm node_owned;  // held to the end, as the node's ranks were split for this call
  const bool one_node = group_on_one_node(group, k, node_owned);
  bool have_fd = false;
  auto mine_owned = map_own(group, position, k, bytes, one_node, &have_fd, deadline, call);
  Region& mine = *mine_owned;
  void* const p = mine.mapped;

  Published me{static_cast<int64_t>(getpid()), mine.fd, mine.base, bytes, have_fd ? 1 : 0};
  std::vector<Published> all;
  try {
    all = gather_published(group, me, k, deadline, call);
  } catch (...) {
    unmap(mine);
    throw;
  }
  if (any_rank_failed(all)) {
    unmap(mine);
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "another rank of the group could not allocate its part");
  }

  // Map every peer's memfd through /proc (same node, same user: the kernel checks ptrace-read rights).
  std::vector<std::unique_ptr<Region>> peers;
  int ok = all_shareable(all) ? 1 : 0;
  for (int j = 0; j < k && ok; ++j) {
    if (j == position) continue;
    void* q = map_peer(all[j]);
    if (q == MAP_FAILED) {
      ok = 0;
      break;
    }
    peers.push_back(peer_region(j, all[j].base, all[j].size, q));
  }
  const bool all_ok = agree_on_mapping(group, ok, mine, peers, deadline, call);
  publish_allocation(std::move(mine_owned), std::move(peers), all_ok);
  // No rank returns before every rank published the regions: an exchange that another thread starts with them
  // right away must find them in every rank's table, or the ranks would reach different verdicts (shared path or
  // not) from the same addresses.
  int64_t published = 1;
  allreduce_min(group, &published, 1, (std::string("the publication round of ") + call).c_str(), deadline);
  if (shared) *shared = all_ok;
  return p;
}

std::unique_ptr<SharedMemory::Region> SharedMemory::map_own(const CollectiveScope& group, int position, int k,
                                                            size_t bytes, bool one_node, bool* have_fd,
                                                            const detail::Deadline& deadline, const char* call) {
  auto mine = std::make_unique<Region>();
  mine->owner = position;
  mine->size = bytes;
  std::string why;
  if (one_node) {
    mine->fd = memfd_create("basp-shared", MFD_CLOEXEC);
    if (mine->fd < 0 || ftruncate(mine->fd, static_cast<off_t>(bytes)) != 0) why = std::strerror(errno);
  }
  *have_fd = one_node && why.empty();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, *have_fd ? MAP_SHARED : (MAP_PRIVATE | MAP_ANONYMOUS),
                 *have_fd ? mine->fd : -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (mine->fd >= 0) close(mine->fd);
    fail_everywhere(group, k, bytes, err, deadline, call);
  }
  mine->mapped = static_cast<std::byte*>(p);
  mine->base = reinterpret_cast<uint64_t>(p);
  return mine;
}

std::unique_ptr<SharedMemory::Region> SharedMemory::peer_region(int owner, uint64_t base, uint64_t size, void* mapped) {
  auto r = std::make_unique<Region>();
  r->owner = owner;
  r->base = base;
  r->size = size;
  r->mapped = static_cast<std::byte*>(mapped);
  return r;
}

bool SharedMemory::agree_on_mapping(const CollectiveScope& group, int ok, Region& mine,
                                    std::vector<std::unique_ptr<Region>>& peers, const detail::Deadline& deadline,
                                    const char* call) {
  int64_t all_ok = ok;
  try {
    allreduce_min(group, &all_ok, 1, (std::string("the mapping check of ") + call).c_str(), deadline);
  } catch (...) {
    for (auto& r : peers) unmap(*r);
    unmap(mine);
    throw;
  }
  return all_ok == 1;
}

void SharedMemory::publish_allocation(std::unique_ptr<Region> mine, std::vector<std::unique_ptr<Region>> peers,
                                      bool all_ok) {
  std::lock_guard<std::mutex> lock(writers_);
  const uint64_t id = next_id_++;
  if (!all_ok) {
    for (auto& r : peers) unmap(*r);
    peers.clear();
  }
  mine->id = id;
  mine->shared = all_ok;
  publish(std::move(mine));
  for (auto& r : peers) {
    r->id = id;
    r->shared = true;
    publish(std::move(r));
  }
}

void SharedMemory::release(const CollectiveScope& group, int position, void* ptr, const detail::Deadline& deadline,
                           const char* call) {
  std::lock_guard<std::mutex> lock(writers_);
  int64_t found_id = -1;
  for (Region* r = head_.load(); r != nullptr && found_id < 0; r = r->next) {
    if (r->live.load() && r->owner == position && r->base == reinterpret_cast<uint64_t>(ptr)) {
      found_id = static_cast<int64_t>(r->id);
    }
  }
  int k = 0;
  BASP_MPI_CHECK(MPI_Comm_size(group.comm, &k));
  std::vector<int64_t> ids(static_cast<size_t>(k));
  allgather_bytes(group, &found_id, sizeof(int64_t), ids.data(),
                  (std::string("the exchange of allocation numbers at ") + call).c_str(), deadline);
  BASP_CHECK_ARG(found_id >= 0, "ptr (", ptr, ") was not returned by basp_mem_alloc on this comm, or was freed");
  for (int j = 0; j < k; ++j) {
    BASP_CHECK_ARG(ids[j] == found_id, "rank at group position ", j, " freed a different allocation (",
                   ids[j] < 0 ? std::string("an unknown pointer") : "allocation #" + std::to_string(ids[j]),
                   ") than this rank (allocation #", found_id, "): basp_mem_free is collective");
  }
  const auto id = static_cast<uint64_t>(found_id);
  for (Region* r = head_.load(); r != nullptr; r = r->next) {
    if (r->id == id && r->live.load()) {
      r->live.store(false);
      unmap(*r);
    }
  }
}

std::byte* SharedMemory::translate(int owner, uint64_t address, uint64_t bytes) const {
  for (const Region* r = head_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    if (r->shared && r->owner == owner && r->live.load(std::memory_order_relaxed) && address >= r->base &&
        bytes <= r->size && address - r->base <= r->size - bytes) {
      return r->mapped + (address - r->base);
    }
  }
  return nullptr;
}

std::byte* SharedMemory::first_region_of(int owner) const {
  // The oldest live shared region: the list is newest first.
  std::byte* found = nullptr;
  for (const Region* r = head_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    if (r->shared && r->owner == owner && r->live.load()) found = r->mapped;
  }
  return found;
}

}  // namespace basp::transport::mpi
