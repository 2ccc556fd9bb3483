#include "runtime/progress.h"

#include <chrono>
#include <utility>

namespace basp::runtime {

struct Progress::Shared {
  mutable std::mutex mutex;
  std::condition_variable work;  // a job was queued, or stop
  std::condition_variable done;  // a job has run
  Job* head = nullptr;
  Job* tail = nullptr;
  Job* running = nullptr;
  bool stop = false;
  std::thread thread;

  static void loop(const std::shared_ptr<Shared>& self);
};

Progress::Progress() : shared_(std::make_shared<Shared>()) {}

Progress::~Progress() {
  std::thread thread;
  {
    const std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    thread = std::move(shared_->thread);
  }
  shared_->work.notify_all();
  if (!thread.joinable()) return;
  // The comm's last reference may go with a job the thread released: it then ends on its own, holding `shared_`.
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();
  } else {
    thread.join();
  }
}

void Progress::Shared::loop(const std::shared_ptr<Shared>& self) {
  Shared& s = *self;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.work.wait(lock, [&] { return s.stop || s.head != nullptr; });
    if (s.head == nullptr) return;  // stop, with nothing left to run
    Job* job = s.head;
    s.head = job->next_;
    if (s.head == nullptr) s.tail = nullptr;
    job->next_ = nullptr;
    job->state_ = Job::State::kRunning;
    s.running = job;
    lock.unlock();
    std::exception_ptr error;
    try {
      job->run();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    std::shared_ptr<void> keep = std::move(job->keep_);
    job->error_ = std::move(error);
    job->state_ = Job::State::kDone;
    s.running = nullptr;
    lock.unlock();
    s.done.notify_all();
    keep.reset();  // may drop the comm, and this object's owner with it; `self` keeps `s`
    lock.lock();
  }
}

void Progress::submit(Job& job, std::shared_ptr<void> keep) {
  Shared& s = *shared_;
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    job.keep_ = std::move(keep);
    job.state_ = Job::State::kQueued;
    job.error_ = nullptr;
    job.next_ = nullptr;
    if (s.tail != nullptr) {
      s.tail->next_ = &job;
    } else {
      s.head = &job;
    }
    s.tail = &job;
    if (!s.thread.joinable()) {
      std::shared_ptr<Shared> self = shared_;
      s.thread = std::thread([self] { Shared::loop(self); });
    }
  }
  s.work.notify_one();
}

bool Progress::idle() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->head == nullptr && shared_->running == nullptr;
}

bool Progress::has_run(const Job& job) const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return job.done();
}

void Progress::wait(const Job& job) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->done.wait(lock, [&] { return !job.pending(); });
}

bool Progress::wait_all(Job* const* jobs, int n, const detail::Deadline& deadline) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  auto none_pending = [&] {
    for (int i = 0; i < n; ++i) {
      if (jobs[i]->pending()) return false;
    }
    return true;
  };
  while (!none_pending()) {
    if (deadline.expired()) return false;
    shared_->done.wait_for(lock, std::chrono::milliseconds(20));
  }
  return true;
}

bool Progress::cancel(Job& job, const std::exception_ptr& error) {
  std::shared_ptr<void> keep;
  {
    const std::lock_guard<std::mutex> lock(shared_->mutex);
    if (job.state_ != Job::State::kQueued) return false;
    Job* previous = nullptr;
    for (Job* j = shared_->head; j != nullptr; previous = j, j = j->next_) {
      if (j != &job) continue;
      (previous != nullptr ? previous->next_ : shared_->head) = j->next_;
      if (shared_->tail == j) shared_->tail = previous;
      break;
    }
    job.next_ = nullptr;
    job.error_ = error;
    job.state_ = Job::State::kDone;
    keep = std::move(job.keep_);
  }
  shared_->done.notify_all();
  return true;  // `keep` goes last
}

}  // namespace basp::runtime
