#include "transport/nccl/nccl_bootstrap.h"

#include <utility>

#include "common/error.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl {

NcclBootstrap::NcclBootstrap(ncclComm_t parent, int device, int32_t rank, int32_t size)
    : parent_(parent),
      device_(device),
      rank_(rank),
      members_(identity_members(size)),
      where_(parent_where("parent NCCL communicator", size)) {}

NcclBootstrap::NcclBootstrap(std::shared_ptr<GroupComm> group, std::vector<int32_t> members, std::string where,
                             int32_t rank)
    : group_(std::move(group)), rank_(rank), members_(std::move(members)), where_(std::move(where)) {
  device_ = group_->device();
}

void NcclBootstrap::allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                              const detail::Deadline& deadline) {
  if (group_) {
    group_->allgather(send, bytes, recv, step, where_, deadline);
  } else {
    allgather_to_host(parent_, device_, send, bytes, recv, step, where_, deadline);
  }
}

std::unique_ptr<NcclBootstrap> parent_bootstrap(ncclComm_t parent) {
  // Without a device there is no NCCL communicator to ask: say so before touching `parent`.
  require_device("the NCCL backend");
  int size = 0;
  int rank = 0;
  int device = -1;
  BASP_NCCL_CHECK(ncclCommCount(parent, &size));
  BASP_NCCL_CHECK(ncclCommUserRank(parent, &rank));
  BASP_NCCL_CHECK(ncclCommCuDevice(parent, &device));
  return std::make_unique<NcclBootstrap>(parent, device, rank, size);
}

}  // namespace basp::transport::nccl
