// A comm's progress thread: runs the comm's queued exchanges one at a time, in the order they were queued, while
// the caller computes (docs/overlap.md). What it runs: the head chunks started split-phase (runtime/plan.h,
// basp_scatter_start), and, while any of them is queued or running, every other execute of the comm's plans (a
// one-call execute, a rank's failed-checks report), so that the group's ranks, which start the same exchanges in
// the same order, run them in that order too. Open MPI makes no progress outside MPI calls: this thread is in one
// for as long as an exchange runs.
//
// Jobs are the callers' objects (a plan's chunk slots, a stack object for an execute that waits): the queue links
// them, so queueing allocates nothing. The thread starts at the first submit and ends with the comm (or, when the
// comm's last reference is dropped on the thread itself, right after the job that dropped it).
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "common/deadline.h"

namespace basp::runtime {

class Progress {
 public:
  class Job {
   public:
    virtual ~Job() = default;
    // The exchange; what it throws is kept for the waiter (error()).
    virtual void run() = 0;
    // Whether the job has run (its error is then final). Read under the progress lock, or after wait().
    bool done() const { return state_ == State::kDone; }
    bool pending() const { return state_ == State::kQueued || state_ == State::kRunning; }
    const std::exception_ptr& error() const { return error_; }
    // Back to unused once its waiter has read the result.
    void reset() {
      state_ = State::kIdle;
      error_ = nullptr;
    }

   private:
    friend class Progress;
    enum class State { kIdle, kQueued, kRunning, kDone };
    State state_ = State::kIdle;
    std::exception_ptr error_;
    Job* next_ = nullptr;
    std::shared_ptr<void> keep_;  // what keeps the job's owner alive until it has run
  };

  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Queues `job` (idle or done) behind the others; starts the thread at the first call. `keep` (the job's owner)
  // is held until the job has run, and dropped on the thread after it is marked done.
  void submit(Job& job, std::shared_ptr<void> keep = nullptr);
  // Whether nothing is queued or running: an execute may then run on the caller's thread.
  bool idle() const;
  // Whether `job` has run (test without blocking).
  bool has_run(const Job& job) const;
  // Blocks until `job` has run.
  void wait(const Job& job);
  // Blocks until none of `jobs[0..n)` is pending, or `deadline`; returns whether none is.
  bool wait_all(Job* const* jobs, int n, const detail::Deadline& deadline);
  // Takes a job that has not begun to run out of the queue, marking it done with `error`; false when it runs or ran.
  bool cancel(Job& job, const std::exception_ptr& error);
  // Runs `step` in queue order: on the caller's thread when the queue is idle, else queued behind the jobs there
  // (waited for); rethrows what it throws.
  template <typename Step>
  void in_order(Step&& step) {
    if (idle()) {
      step();
      return;
    }
    StepJob<Step> job(step);
    submit(job);
    wait(job);
    if (job.error()) std::rethrow_exception(job.error());
  }

 private:
  template <typename Step>
  class StepJob final : public Job {
   public:
    explicit StepJob(Step& step) : step_(step) {}
    void run() override { step_(); }

   private:
    Step& step_;
  };
  struct Shared;  // what the thread uses: kept alive by the thread itself
  std::shared_ptr<Shared> shared_;
};

}  // namespace basp::runtime
