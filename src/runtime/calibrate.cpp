#include "runtime/calibrate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/error.h"
#include "plan/calibration.h"
#include "plan/dtype.h"
#include "runtime/batch.h"
#include "runtime/plan.h"

namespace basp::runtime {
namespace {

constexpr int64_t kDefaultMaxBytes = int64_t{4} << 20;
constexpr int32_t kDefaultRepeats = 5;
constexpr int64_t kHeads = plan::kCalibrationHeads;
constexpr int64_t kHeadDim = plan::kCalibrationHeadDim;
using plan::largest_group;

// An all-gather of one byte over the world: no rank starts a timed execute before every rank is ready.
void synchronise(transport::Bootstrap& world, int32_t n, const detail::Deadline& deadline) {
  const char one = 1;
  std::vector<char> all(static_cast<size_t>(n));
  world.allgather(&one, 1, all.data(), "the synchronisation of basp_comm_calibrate", deadline);
}

// The batch plan of the membership, one calibration tensor of `rows` tokens per rank (all of them on a rank alone).
std::shared_ptr<Plan> membership_plan(const std::shared_ptr<Comm>& comm,
                                      const std::vector<std::vector<int32_t>>& members, int64_t rows) {
  BatchRequest request;
  for (const auto& m : members) request.groups.push_back({m, 1, {}});
  request.tensors.layout = BASP_LAYOUT_BSHD;
  request.tensors.dtype = BASP_DTYPE_BYTE;
  request.tensors.elem_size = plan::dtype_size(BASP_DTYPE_BYTE);
  request.tensors.seq_len = rows * largest_group(members);  // each rank about `rows` tokens; a rank alone all
  request.tensors.head_dims = {kHeadDim};
  request.tensors.num_heads = {kHeads};
  request.tensors.split_heads = {kHeads};
  request.check_capacity = false;
  return make_batch_plan(comm, request);
}

// This rank's median time of the plan's execute over `repeats` synchronised runs, after one warm-up; `chunks` > 1:
// of its head chunks 0..chunks-1 executed one after another.
double median_execute(transport::BatchTransport& transport, void* stream, Plan& plan, int32_t chunks, int32_t repeats,
                      int32_t n, const detail::Deadline& deadline) {
  const basp_plan_info_v1 info = plan.info();
  // The backend's memory (device memory on NCCL); an execute is timed to its end on the device.
  const auto in = transport.buffer(info.seq_sharded_elems[0]);
  const auto out = transport.buffer(info.head_sharded_elems[0]);
  const void* ins[1] = {in->get()};
  void* outs[1] = {out->get()};
  auto exchange = [&] {
    for (int32_t c = 0; c < chunks; ++c)
      plan.execute(Direction::kScatter, Plan::kPlanTokens, plan::HeadChunk{c, chunks}, ins, outs, stream);
    transport.finish(stream);
  };
  exchange();  // warm-up
  std::vector<double> times;
  for (int32_t i = 0; i < repeats; ++i) {
    synchronise(transport.world(), n, deadline);
    const auto t0 = std::chrono::steady_clock::now();
    exchange();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// This rank's medians per membership as plan::calibration_samples reads them: one per size, whole, then the
// largest size in plan::calibration_chunks head chunks where those are 2 or more (its plan made once more: a plan per
// measurement, as before).
std::vector<double> measure_medians(const std::shared_ptr<Comm>& comm, transport::BatchTransport& transport,
                                    const std::vector<plan::Membership>& memberships, const std::vector<int64_t>& sizes,
                                    int32_t repeats, const detail::Deadline& deadline) {
  const int32_t n = comm->layout().world_size;
  std::vector<double> mine;
  void* const stream = transport.stream();
  for (const auto& members : memberships) {
    for (size_t i = 0; i < plan::calibration_medians_per_membership(sizes, members, comm->backend()); ++i) {
      const bool chunked = i == sizes.size();
      auto plan = membership_plan(comm, members, chunked ? sizes.back() : sizes[i]);
      const int32_t chunks = chunked ? plan::calibration_chunks(members, comm->backend()) : 1;
      mine.push_back(median_execute(transport, stream, *plan, chunks, repeats, n, deadline));
    }
  }
  return mine;
}

}  // namespace

void calibrate(const std::shared_ptr<Comm>& comm, int64_t max_bytes, int32_t repeats) {
  transport::BatchTransport& transport = comm->batch_transport("basp_comm_calibrate");
  BASP_CHECK_ARG(max_bytes == 0 || (max_bytes >= 4096 && max_bytes <= (int64_t{1} << 30)), "max_bytes (", max_bytes,
                 ") must be 0 (4 MiB) or in 4096..1 GiB");
  BASP_CHECK_ARG(repeats >= 0 && repeats <= 1000, "repeats (", repeats, ") must be in 0..1000 (0: ", kDefaultRepeats,
                 ")");
  if (max_bytes == 0) max_bytes = kDefaultMaxBytes;
  if (repeats == 0) repeats = kDefaultRepeats;
  const plan::PlacementInput& machine = comm->machine();
  const int32_t n = comm->layout().world_size;
  BASP_CHECK(n >= 2, BASP_ERROR_UNSUPPORTED, "basp_comm_calibrate: a comm of one rank has no exchange to measure");
  const auto memberships = plan::calibration_memberships(machine);
  const std::vector<int64_t> sizes = plan::calibration_tokens(max_bytes);
  transport::Bootstrap& world = transport.world();
  const detail::Deadline deadline(comm->options().timeout_ms);
  const std::vector<double> mine = measure_medians(comm, transport, memberships, sizes, repeats, deadline);
  std::vector<double> all(mine.size() * static_cast<size_t>(n));
  world.allgather(mine.data(), mine.size() * sizeof(double), all.data(), "the timings of basp_comm_calibrate",
                  deadline);
  const std::vector<plan::CostSample> samples =
      plan::calibration_samples(machine, memberships, sizes, comm->backend(), mine.size(), all);
  comm->set_cost_model(plan::calibrated_model(machine, samples, comm->cost_model(), repeats, max_bytes));
}

}  // namespace basp::runtime
