// What every plan executor repeats: its plan, its exchange path (fixed at creation) and the path and control rounds
// of its last execute, which basp_plan_query reads from any thread. `Path` is a backend's path interface, with
// id() and workspace_bytes().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "plan/exchange.h"
#include "transport/transport.h"

namespace basp::transport {

template <typename Path>
class ExecutorBase : public PlanExecutor {
 public:
  const plan::ExchangePlan& plan() const override { return plan_; }
  const ExecuteNeeds& needs() const override { return needs_; }
  int64_t workspace_bytes() const override { return path_->workspace_bytes(); }
  basp_path_t plan_path() const override { return path_->id(); }
  basp_path_t last_path() const override { return last_path_.load(std::memory_order_relaxed); }
  int32_t last_control_rounds() const override { return last_rounds_.load(std::memory_order_relaxed); }

 protected:
  ExecutorBase(const plan::ExchangePlan& plan, const ExecuteNeeds& needs) : plan_(plan), needs_(needs) {}
  void set_last_path(basp_path_t path) { last_path_.store(path, std::memory_order_relaxed); }
  void set_last_rounds(int32_t rounds) { last_rounds_.store(rounds, std::memory_order_relaxed); }

  plan::ExchangePlan plan_;
  std::unique_ptr<Path> path_;

 private:
  ExecuteNeeds needs_;
  std::atomic<basp_path_t> last_path_{BASP_PATH_NONE};
  std::atomic<int32_t> last_rounds_{0};
};

}  // namespace basp::transport
