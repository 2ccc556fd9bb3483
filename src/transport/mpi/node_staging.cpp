#include "transport/mpi/node_staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace basp::transport::mpi {
namespace {

constexpr int64_t kGrain = int64_t{1} << 20;  // regions grow in whole MiB: fewer mappings

int64_t rounded(int64_t bytes) { return std::max<int64_t>(kGrain, (bytes + kGrain - 1) / kGrain * kGrain); }

struct Published {
  int64_t pid;
  int64_t fd[2];  // per direction (scatter, gather); -1: this rank has no region
};

}  // namespace

std::vector<int32_t> working_nodes(const std::vector<uint64_t>& nodes, const std::vector<int64_t>& ok) {
  std::vector<uint64_t> keys;
  std::vector<bool> node_ok;
  std::vector<int32_t> out(nodes.size(), -1);
  for (size_t r = 0; r < nodes.size(); ++r) {
    const auto at = static_cast<size_t>(std::find(keys.begin(), keys.end(), nodes[r]) - keys.begin());
    if (at == keys.size()) keys.push_back(nodes[r]), node_ok.push_back(true);
    node_ok[at] = node_ok[at] && ok[r] != 0;
    out[r] = static_cast<int32_t>(at);
  }
  for (int32_t& n : out) {
    if (!node_ok[static_cast<size_t>(n)]) n = -1;
  }
  return out;
}

bool on_one_working_node(const std::vector<int32_t>& node, const std::vector<int32_t>& members) {
  if (members.size() < 2 || node.empty() || node[static_cast<size_t>(members[0])] < 0) return false;
  for (int32_t r : members) {
    if (node[static_cast<size_t>(r)] != node[static_cast<size_t>(members[0])]) return false;
  }
  return true;
}

NodeStaging::~NodeStaging() {
  for (const Mapping& m : mappings_) munmap(m.address, m.bytes);
  close_peers();
  for (Regions& r : regions_) {
    if (r.own_fd >= 0) close(r.own_fd);
  }
}

void NodeStaging::close_peers() {
  for (Regions& r : regions_) {
    for (int& fd : r.peer_fd) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
}

void NodeStaging::set_up(const CollectiveScope& world, int32_t me, const std::vector<uint64_t>& nodes,
                         const detail::Deadline& deadline) {
  const size_t n = world.members.size();
  me_ = me;
  if (nodes.size() != n) return;  // the same on every rank: no staging, no round
  Published mine{static_cast<int64_t>(getpid()), {-1, -1}};
  int64_t ok = 1;
  for (int d = 0; d < 2; ++d) {
    regions_[d].own_fd = memfd_create("basp-batch-staging", MFD_CLOEXEC);
    mine.fd[d] = regions_[d].own_fd;
    if (regions_[d].own_fd < 0) ok = 0;
  }
  std::vector<Published> all(n);
  allgather_bytes(world, &mine, sizeof mine, all.data(), "the exchange of the batch staging regions at comm creation",
                  deadline);
  for (int d = 0; d < 2; ++d) {
    Regions& regions = regions_[d];
    regions.peer_fd.assign(n, -1);
    regions.peer_bytes.assign(n, 0);
    regions.peer_base.assign(n, nullptr);
    for (size_t r = 0; r < n && ok; ++r) {
      if (static_cast<int32_t>(r) == me || nodes[r] != nodes[static_cast<size_t>(me)]) continue;
      if (all[r].fd[d] < 0) {
        ok = 0;
        break;
      }
      const std::string path = "/proc/" + std::to_string(all[r].pid) + "/fd/" + std::to_string(all[r].fd[d]);
      regions.peer_fd[r] = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (regions.peer_fd[r] < 0) ok = 0;
    }
  }
  std::vector<int64_t> oks(n);
  allgather_bytes(world, &ok, sizeof ok, oks.data(), "the check of the batch staging regions at comm creation",
                  deadline);
  node_ = working_nodes(nodes, oks);
  if (!usable(me)) close_peers();
}

bool NodeStaging::one_node(const std::vector<int32_t>& members) const { return on_one_working_node(node_, members); }

std::byte* NodeStaging::map(int fd, int64_t bytes, const char* whose, int32_t rank) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "mmap of ", bytes, " bytes of ", whose, " batch staging region (world rank ",
                 rank, ") failed: ", std::strerror(errno));
  }
  mappings_.push_back({static_cast<std::byte*>(p), static_cast<size_t>(bytes)});
  return static_cast<std::byte*>(p);
}

std::byte* NodeStaging::own(Direction direction, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  BASP_CHECK(usable(me_), BASP_ERROR_INTERNAL, "this rank's node has no batch staging");
  Regions& r = regions(direction);
  if (bytes <= r.own_bytes && r.own_base != nullptr) return r.own_base;
  const int64_t size = rounded(bytes);
  if (ftruncate(r.own_fd, static_cast<off_t>(size)) != 0) {
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "growing this rank's batch ", direction_name(direction),
                 " staging region to ", size, " bytes failed: ", std::strerror(errno));
  }
  std::byte* base = map(r.own_fd, size, "this rank's", me_);
  std::memset(base + r.own_bytes, 0, static_cast<size_t>(size - r.own_bytes));  // fault the new pages in now
  r.own_base = base;
  r.own_bytes = size;
  return base;
}

std::byte* NodeStaging::peer(Direction direction, int32_t peer, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto at = static_cast<size_t>(peer);
  Regions& r = regions(direction);
  BASP_CHECK(usable(me_) && r.peer_fd[at] >= 0, BASP_ERROR_INTERNAL, "world rank ", peer,
             " is no batch staging peer of this rank");
  // The peer grows its region in its own time; this mapping may run past its end until then (nothing is read there
  // before the peer's first message of an exchange that needs it).
  if (bytes > r.peer_bytes[at] || r.peer_base[at] == nullptr) {
    const int64_t size = rounded(bytes);
    r.peer_base[at] = map(r.peer_fd[at], size, "a peer's", peer);
    r.peer_bytes[at] = size;
  }
  return r.peer_base[at];
}

}  // namespace basp::transport::mpi
