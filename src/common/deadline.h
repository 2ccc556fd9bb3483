// A point in time by which a blocking step must have finished (the comm's timeout, docs/reliability.md).
// Measured on the monotonic clock, so a wall-clock change never fires or stretches it. timeout_ms 0 means
// "never": the step waits as long as MPI would.
#pragma once

#include <chrono>
#include <cstdint>

namespace basp::detail {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Deadline(int64_t timeout_ms)
      : start_(Clock::now()), timeout_ms_(timeout_ms), end_(start_ + std::chrono::milliseconds(timeout_ms)) {}

  bool never() const { return timeout_ms_ <= 0; }
  bool expired(Clock::time_point now) const { return !never() && now >= end_; }
  bool expired() const { return expired(Clock::now()); }
  int64_t timeout_ms() const { return timeout_ms_; }
  int64_t elapsed_ms(Clock::time_point now) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - start_).count();
  }
  int64_t elapsed_ms() const { return elapsed_ms(Clock::now()); }

 private:
  Clock::time_point start_;
  int64_t timeout_ms_;
  Clock::time_point end_;
};

}  // namespace basp::detail
