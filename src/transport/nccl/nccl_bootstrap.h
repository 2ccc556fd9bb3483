// transport::Bootstrap over NCCL: the parent of basp_comm_create_nccl (a parent ncclComm_t, the caller's) and the
// group collectives of an NCCL comm (its GroupComm). Each all-gather runs host memory to host memory through
// collective_to_host (nccl_util.h), polled against the deadline.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap.h"
#include "transport/nccl/nccl_group_comm.h"

namespace basp::transport::nccl {

class NcclBootstrap final : public Bootstrap {
 public:
  // A parent NCCL communicator on its CUDA device.
  NcclBootstrap(ncclComm_t parent, int device, int32_t rank, int32_t size);
  // The group communicator of a comm; `members` and `where` name the group's ranks.
  NcclBootstrap(std::shared_ptr<GroupComm> group, std::vector<int32_t> members, std::string where, int32_t rank);

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(members_.size()); }
  const std::vector<int32_t>& members() const override { return members_; }
  const std::string& where() const override { return where_; }
  void allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                 const detail::Deadline& deadline) override;

  ncclComm_t parent() const { return parent_; }
  int device() const { return device_; }

 private:
  ncclComm_t parent_ = nullptr;       // set for a parent
  std::shared_ptr<GroupComm> group_;  // set for a group
  int device_ = -1;
  int32_t rank_ = 0;
  std::vector<int32_t> members_;
  std::string where_;
};

// The parent of basp_comm_create_nccl. Throws at once (on this rank only) when there is no CUDA device or NCCL
// rejects the communicator.
std::unique_ptr<NcclBootstrap> parent_bootstrap(ncclComm_t parent);

}  // namespace basp::transport::nccl
