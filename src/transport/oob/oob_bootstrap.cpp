#include "transport/oob/oob_bootstrap.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"
#include "common/keep_forever.h"

namespace basp::transport::oob {
namespace {

constexpr int32_t kMaxRanks = int32_t{1} << 24;
// Poll as fast as the callbacks allow for a while (an all-gather among ranks that are all present completes
// within milliseconds), then give the core away between tests.
constexpr int64_t kSpinMs = 10;

struct Buffers {
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
};

}  // namespace

OobBootstrap::OobBootstrap(const basp_oob_v1& oob) : oob_(oob) {
  BASP_CHECK(oob.allgather_start != nullptr, BASP_ERROR_NULL_POINTER, "oob->allgather_start is NULL");
  BASP_CHECK(oob.allgather_test != nullptr, BASP_ERROR_NULL_POINTER, "oob->allgather_test is NULL");
  BASP_CHECK(oob.allgather_free != nullptr, BASP_ERROR_NULL_POINTER, "oob->allgather_free is NULL");
  BASP_CHECK_ARG(oob.num_ranks >= 1 && oob.num_ranks <= kMaxRanks, "oob->num_ranks (", oob.num_ranks,
                 ") must be in 1..", kMaxRanks);
  BASP_CHECK_ARG(oob.rank >= 0 && oob.rank < oob.num_ranks, "oob->rank (", oob.rank, ") is outside 0..",
                 oob.num_ranks - 1);
  members_ = identity_members(oob.num_ranks);
  where_ = parent_where("out-of-band group", oob.num_ranks);
}

void OobBootstrap::allgather(const void* send, size_t bytes, void* recv, const std::string& step,
                             const detail::Deadline& deadline) {
  auto buffers = std::make_shared<Buffers>();
  buffers->send.resize(bytes);
  buffers->recv.resize(bytes * static_cast<size_t>(oob_.num_ranks));
  if (bytes > 0) std::memcpy(buffers->send.data(), send, bytes);
  void* request = nullptr;
  const int started = oob_.allgather_start(oob_.user_data, buffers->send.data(), buffers->recv.data(), bytes, &request);
  if (started != BASP_OOB_SUCCESS) {
    // Nothing was started: the buffers are the library's again.
    detail::fail(BASP_ERROR_OOB, "oob->allgather_start returned ", started, " (not BASP_OOB_SUCCESS) in ", step, " in ",
                 where_);
  }
  for (;;) {
    const int tested = oob_.allgather_test(oob_.user_data, request);
    if (tested == BASP_OOB_SUCCESS) break;
    if (tested != BASP_OOB_IN_PROGRESS) {
      oob_.allgather_free(oob_.user_data, request);
      detail::keep_forever(buffers);
      detail::fail(BASP_ERROR_OOB, "oob->allgather_test returned ", tested,
                   " (neither BASP_OOB_SUCCESS nor BASP_OOB_IN_PROGRESS) in ", step, " in ", where_);
    }
    if (deadline.expired()) {
      oob_.allgather_free(oob_.user_data, request);
      detail::keep_forever(buffers);  // the abandoned all-gather may still write them
      detail::fail(BASP_ERROR_TIMEOUT, "timed out after ", deadline.elapsed_ms(), " ms (timeout ",
                   deadline.timeout_ms(), " ms: config->timeout_ms or BASP_TIMEOUT_MS) in ", step, " in ", where_,
                   ": a rank did not join the out-of-band all-gather (oob->allgather_test never completed)");
    }
    if (deadline.elapsed_ms() >= kSpinMs) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      sched_yield();
    }
  }
  const int freed = oob_.allgather_free(oob_.user_data, request);
  BASP_CHECK(freed == BASP_OOB_SUCCESS, BASP_ERROR_OOB, "oob->allgather_free returned ", freed,
             " (not BASP_OOB_SUCCESS) in ", step, " in ", where_);
  if (!buffers->recv.empty()) std::memcpy(recv, buffers->recv.data(), buffers->recv.size());
}

}  // namespace basp::transport::oob
