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
  int64_t fd;  // -1: this rank has no region
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
  for (int fd : peer_fd_) {
    if (fd >= 0) close(fd);
  }
  if (own_fd_ >= 0) close(own_fd_);
}

void NodeStaging::set_up(const CollectiveScope& world, int32_t me, const std::vector<uint64_t>& nodes,
                         const detail::Deadline& deadline) {
  const size_t n = world.members.size();
  me_ = me;
  if (nodes.size() != n) return;  // the same on every rank: no staging, no round
  own_fd_ = memfd_create("basp-batch-staging", MFD_CLOEXEC);
  const Published mine{static_cast<int64_t>(getpid()), own_fd_};
  std::vector<Published> all(n);
  allgather_bytes(world, &mine, sizeof mine, all.data(), "the exchange of the batch staging regions at comm creation",
                  deadline);
  peer_fd_.assign(n, -1);
  peer_bytes_.assign(n, 0);
  peer_base_.assign(n, nullptr);
  int64_t ok = own_fd_ >= 0 ? 1 : 0;
  for (size_t r = 0; r < n && ok; ++r) {
    if (static_cast<int32_t>(r) == me || nodes[r] != nodes[static_cast<size_t>(me)]) continue;
    if (all[r].fd < 0) {
      ok = 0;
      break;
    }
    const std::string path = "/proc/" + std::to_string(all[r].pid) + "/fd/" + std::to_string(all[r].fd);
    peer_fd_[r] = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (peer_fd_[r] < 0) ok = 0;
  }
  std::vector<int64_t> oks(n);
  allgather_bytes(world, &ok, sizeof ok, oks.data(), "the check of the batch staging regions at comm creation",
                  deadline);
  node_ = working_nodes(nodes, oks);
  if (!usable(me)) {
    for (int& fd : peer_fd_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
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

std::byte* NodeStaging::own(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  BASP_CHECK(usable(me_), BASP_ERROR_INTERNAL, "this rank's node has no batch staging");
  if (bytes <= own_bytes_ && own_base_ != nullptr) return own_base_;
  const int64_t size = rounded(bytes);
  if (ftruncate(own_fd_, static_cast<off_t>(size)) != 0) {
    detail::fail(BASP_ERROR_OUT_OF_MEMORY, "growing this rank's batch staging region to ", size,
                 " bytes failed: ", std::strerror(errno));
  }
  std::byte* base = map(own_fd_, size, "this rank's", me_);
  std::memset(base + own_bytes_, 0, static_cast<size_t>(size - own_bytes_));  // fault the new pages in now
  own_base_ = base;
  own_bytes_ = size;
  return base;
}

std::byte* NodeStaging::peer(int32_t peer, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto r = static_cast<size_t>(peer);
  BASP_CHECK(usable(me_) && peer_fd_[r] >= 0, BASP_ERROR_INTERNAL, "world rank ", peer,
             " is no batch staging peer of this rank");
  // The peer grows its region in its own time; this mapping may run past its end until then (nothing is read there
  // before the peer's first message of an exchange that needs it).
  if (bytes > peer_bytes_[r] || peer_base_[r] == nullptr) {
    const int64_t size = rounded(bytes);
    peer_base_[r] = map(peer_fd_[r], size, "a peer's", peer);
    peer_bytes_[r] = size;
  }
  return peer_base_[r];
}

}  // namespace basp::transport::mpi
