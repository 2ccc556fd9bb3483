// runtime::Plan's split-phase head chunks (plan.h, docs/overlap.md): the round rules checked on the caller's
// thread, the exchanges run by the comm's progress thread (progress.h).
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "plan/head_chunks.h"
#include "runtime/plan.h"

namespace basp::runtime {
namespace {

const char* start_call(Direction direction) {
  return direction == Direction::kScatter ? "basp_scatter_start" : "basp_gather_start";
}

}  // namespace

void Plan::ChunkJob::run() {
  plan->comm_->collective([&] {
    plan->check_usable();
    plan->executor_->execute(direction, call, inputs.data(), outputs.data(), nullptr);
  });
}

// Everything a start must satisfy beyond an execute's checks; changes nothing but the slots' first making.
void Plan::check_start(Direction direction, plan::HeadChunk chunk) {
  plan::check_head_chunk(exchange_, chunk);
  if (!split_checked_) {
    executor_->check_split_phase();
    split_checked_ = true;
  }
  ChunkRound& r = round(direction);
  if (r.jobs.empty()) {
    const auto max = static_cast<size_t>(plan::max_head_chunks(exchange_));
    for (ChunkRound& each : rounds_) {
      each.jobs = std::vector<ChunkJob>(max);
      each.begun.assign(max, false);
      for (ChunkJob& job : each.jobs) job.plan = this;
    }
  }
  const ChunkJob& job = r.jobs[static_cast<size_t>(chunk.index)];
  BASP_CHECK_ARG(!job.in_use, "chunk ", chunk.index, " of ", chunk.count, " was started and not waited for (",
                 direction == Direction::kScatter ? "basp_scatter_wait" : "basp_gather_wait",
                 "): wait for it before starting it again");
  if (r.count != 0) {
    BASP_CHECK_ARG(chunk.count == r.count, "num_chunks (", chunk.count, ") differs from the open round's (", r.count,
                   ", ", r.started, " of its chunks started)");
    BASP_CHECK_ARG(!r.begun[static_cast<size_t>(chunk.index)], "chunk ", chunk.index,
                   " was already started in this round of ", r.count);
  }
  check_batch_gather(direction);
  if (!exchange_.replicated) return;
  if (direction == Direction::kGather) {
    const int32_t next = r.count == 0 ? 0 : r.started;
    BASP_CHECK_ARG(chunk.index == next, "the plan's gather sums heads several ranks hold, so its chunks start in ",
                   "order: expected chunk ", next, ", got ", chunk.index);
  } else if (!batch_) {
    // A batch plan's scatters use the pool's scatter workspace, which its gather never touches.
    const ChunkRound& gather = round(Direction::kGather);
    BASP_CHECK_ARG(gather.count == 0, "the plan's gather sums heads several ranks hold and ", gather.started,
                   " of its ", gather.count, " chunks are started: their contributions wait in the plan's workspace ",
                   "until the last, so no scatter of this plan may run between them (use a second plan for the ",
                   "gather)");
  }
}

// Batch plans share the comm's pool, one workspace per direction: while one's gather that sums held heads is part
// way through its chunks, no other batch plan of the comm gathers (scatters may).
void Plan::check_batch_gather(Direction direction) const {
  if (!batch_ || direction != Direction::kGather) return;
  const Comm::OpenGather open = comm_->open_batch_gather();
  BASP_CHECK_ARG(open.plan == nullptr || open.plan == this, direction_call(direction), ": batch plan ", open.plan,
                 " of this comm has a gather that sums heads several ranks hold with ", open.started, " of its ",
                 open.count, " chunks started; their contributions wait in the batch plans' gather workspace, so no ",
                 "other batch plan (this is ", static_cast<const void*>(this), ") may gather before its last chunk ",
                 "starts (scatters may)");
}

// A one-call execute (or the internal chunk execute) takes the plan whole: no chunk in flight, no round open.
void Plan::check_no_chunks(Direction direction) {
  check_batch_gather(direction);
  const char* op = direction_name(direction);
  for (int d = 0; d < 2; ++d) {
    const Direction dir = d == 0 ? Direction::kScatter : Direction::kGather;
    ChunkRound& r = round(dir);
    for (size_t c = 0; c < r.jobs.size(); ++c) {
      BASP_CHECK_ARG(!r.jobs[c].in_use, op, ": ", direction_name(dir), " chunk ", c, " of the plan is started and ",
                     "not waited for (", dir == Direction::kScatter ? "basp_scatter_wait" : "basp_gather_wait",
                     "): a one-call exchange takes the plan whole");
    }
    BASP_CHECK_ARG(r.count == 0, op, ": a round of ", r.count, " ", direction_name(dir), " chunks is open (", r.started,
                   " started): start the others before a one-call exchange");
  }
}

void Plan::start(Direction direction, int32_t index, int32_t count, int64_t tokens, const void* const* inputs,
                 void* const* outputs, void* stream) {
  check_usable();
  const plan::HeadChunk chunk{index, count};
  int64_t call = tokens;
  ChunkJob* job = nullptr;
  try {
    call = call_tokens(direction, tokens);
    check_documents(direction, call);
    check_start(direction, chunk);
    job = &round(direction).jobs[static_cast<size_t>(index)];
    exchange_.call(call, chunk, direction, job->call);
    check_buffers(direction, job->call, inputs, outputs, stream);
  } catch (const detail::Error&) {
    const std::exception_ptr own = std::current_exception();
    in_order([&] { executor_->fail(direction, call, chunk, own); });
  }
  // A device-ordered backend enqueues the chunk now, on the caller's thread (a failure leaves the round as it was).
  transport::StreamChunks* device = executor_->stream_chunks();
  if (device != nullptr) {
    comm_->collective([&] {
      check_usable();
      device->start(direction, job->call, inputs, outputs, stream);
    });
  }
  ChunkRound& r = round(direction);
  if (r.count == 0) {
    r.count = count;
    r.started = 0;
    r.begun.assign(r.begun.size(), false);
  }
  r.begun[static_cast<size_t>(index)] = true;
  if (++r.started == r.count) r.count = 0;  // every chunk of the round started: closed
  if (batch_ && exchange_.replicated && direction == Direction::kGather) {
    comm_->set_open_batch_gather(r.count == 0 ? Comm::OpenGather{} : Comm::OpenGather{this, r.started, r.count});
  }
  job->direction = direction;
  for (int32_t t = 0; t < exchange_.num_tensors(); ++t) {
    job->inputs[static_cast<size_t>(t)] = inputs[t];
    job->outputs[static_cast<size_t>(t)] = outputs[t];
  }
  job->in_use = true;
  if (device == nullptr) comm_->progress().submit(*job, shared_from_this());
  BASP_LOG(TRACE, start_call(direction), ": plan ", static_cast<const void*>(this), ", chunk ", index, " of ", count,
           ", ", call, " tokens queued");
}

Plan::ChunkJob& Plan::started_job(Direction direction, int32_t chunk) {
  ChunkRound& r = round(direction);
  BASP_CHECK_ARG(chunk >= 0 && static_cast<size_t>(chunk) < r.jobs.size(), "chunk (", chunk, ") is ",
                 r.jobs.empty() ? "not a started chunk: the plan has started none"
                                : "outside 0.." + std::to_string(r.jobs.size() - 1));
  ChunkJob& job = r.jobs[static_cast<size_t>(chunk)];
  BASP_CHECK_ARG(job.in_use, "chunk ", chunk, " is not started (or was already waited for)");
  return job;
}

bool Plan::test(Direction direction, int32_t chunk) {
  const ChunkJob& job = started_job(direction, chunk);
  if (transport::StreamChunks* device = executor_->stream_chunks()) {
    return comm_->collective([&] { return device->test(direction, chunk); });
  }
  return comm_->progress().has_run(job);
}

void Plan::wait(Direction direction, int32_t chunk) {
  ChunkJob& job = started_job(direction, chunk);
  if (transport::StreamChunks* device = executor_->stream_chunks()) {
    job.in_use = false;  // whatever the wait finds, the chunk is no longer the caller's to wait for
    comm_->collective([&] { device->wait(direction, chunk); });
    return;
  }
  comm_->progress().wait(job);
  const std::exception_ptr error = job.error();
  job.in_use = false;
  job.reset();
  if (error) std::rethrow_exception(error);
}

void Plan::drain() {
  if (comm_->open_batch_gather().plan == this) comm_->set_open_batch_gather({});
  std::vector<Progress::Job*> in_use;
  for (ChunkRound& r : rounds_) {
    for (ChunkJob& job : r.jobs) {
      if (job.in_use) in_use.push_back(&job);
    }
  }
  if (in_use.empty()) return;
  Progress& progress = comm_->progress();
  const detail::Deadline deadline(comm_->options().timeout_ms);
  BASP_LOG(WARN, "basp_plan_destroy: plan ", static_cast<const void*>(this), " has ", in_use.size(),
           " chunk(s) started and not waited for");
  if (transport::StreamChunks* device = executor_->stream_chunks()) {
    for (Progress::Job* job : in_use) static_cast<ChunkJob*>(job)->in_use = false;
    comm_->collective([&] {  // a timeout breaks the comm
      BASP_CHECK(device->drain(deadline), BASP_ERROR_TIMEOUT, "basp_plan_destroy: chunks of the plan were still in ",
                 "flight on the device after the comm's timeout (", comm_->options().timeout_ms, " ms); the ",
                 "communicator was aborted, which ended them: destroy the comm's plans and the comm");
    });
    return;
  }
  if (progress.wait_all(in_use.data(), static_cast<int>(in_use.size()), deadline)) {
    for (Progress::Job* job : in_use) {  // the first error of a chunk nobody will wait for now
      if (job->error()) std::rethrow_exception(job->error());
    }
    return;
  }
  size_t cancelled = 0;
  const std::exception_ptr gone = std::make_exception_ptr(
      detail::Error(BASP_ERROR_TIMEOUT, "the plan was destroyed before this chunk's exchange began"));
  for (Progress::Job* job : in_use) cancelled += progress.cancel(*job, gone) ? 1 : 0;
  detail::fail(BASP_ERROR_TIMEOUT, "basp_plan_destroy: chunks of the plan were still in flight after the comm's ",
               "timeout (", comm_->options().timeout_ms, " ms); ", cancelled, " not yet begun were taken out of the ",
               "queue, the running one ends within its own deadline and the plan's memory goes with it");
}

}  // namespace basp::runtime
