// A parent made of the caller's out-of-band collectives (basp_comm_create_oob): the callbacks of a basp_oob_v1,
// whatever implements them (torch.distributed, JAX, a launcher, MPI in the tests). The all-gather is started once
// and tested until it completes or the deadline passes; the library owns its buffers and keeps them for the life of
// the process when the operation is abandoned (common/keep_forever.h), since it may still complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "transport/bootstrap.h"

namespace basp::transport::oob {

class OobBootstrap final : public Bootstrap {
 public:
  // Checks the channel itself: a NULL callback, a size outside 1..2^24, a rank outside 0..num_ranks-1 throw (on
  // this rank only: nothing reaches the others through a channel that is not there).
  explicit OobBootstrap(const basp_oob_v1& oob);

  int32_t rank() const override { return oob_.rank; }
  int32_t size() const override { return oob_.num_ranks; }
  const std::vector<int32_t>& members() const override { return members_; }
  const std::string& where() const override { return where_; }
  void allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                 const detail::Deadline& deadline) override;

 private:
  basp_oob_v1 oob_;
  std::vector<int32_t> members_;
  std::string where_;
};

}  // namespace basp::transport::oob
