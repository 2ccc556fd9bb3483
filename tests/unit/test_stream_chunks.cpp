// The runtime's side of split-phase head chunks on a device-ordered backend (transport::StreamChunks, the NCCL
// executor's): runtime::Plan over an executor double that records what it is asked, so CI, which has no GPU, checks
// that a start enqueues at once on the caller's thread (the comm's progress thread stays idle), that test and wait
// go to the executor, that the rounds' rules still hold, and that basp_plan_destroy's drain turns chunks still in
// flight past the timeout into BASP_ERROR_TIMEOUT and a broken comm.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "plan/exchange.h"
#include "plan/head_chunks.h"
#include "runtime/comm.h"
#include "runtime/plan.h"
#include "transport/transport.h"

using basp::Direction;

namespace {

class NoTransport final : public basp::transport::GroupTransport {
 public:
  basp_backend_t backend() const override { return BASP_BACKEND_NCCL; }
  basp::transport::Bootstrap& group() override { basp::detail::fail(BASP_ERROR_INTERNAL, "no group in this test"); }
  std::unique_ptr<basp::transport::PlanExecutor> make_executor(const basp::plan::ExchangePlan&,
                                                               const basp::transport::PlanContext&) override {
    basp::detail::fail(BASP_ERROR_INTERNAL, "no executor in this test");
  }
};

// What the double was asked, in order, and what it answers.
struct Record {
  std::vector<std::string> calls;
  bool done = false;       // test's answer
  bool drained = true;     // drain's answer
  void* stream = nullptr;  // the last start's stream
};

class DeviceChunksDouble final : public basp::transport::PlanExecutor, public basp::transport::StreamChunks {
 public:
  DeviceChunksDouble(const basp::plan::ExchangePlan& plan, Record& record) : plan_(plan), record_(record) {}
  const basp::plan::ExchangePlan& plan() const override { return plan_; }
  const basp::transport::ExecuteNeeds& needs() const override { return needs_; }
  void execute(Direction d, const basp::plan::CallGeometry& call, const void* const*, void* const*, void*) override {
    record_.calls.push_back(name("execute", d, call.chunk.index, call.chunk.count));
  }
  void check_split_phase() const override {}
  StreamChunks* stream_chunks() override { return this; }
  void start(Direction d, const basp::plan::CallGeometry& call, const void* const*, void* const*,
             void* stream) override {
    record_.calls.push_back(name("start", d, call.chunk.index, call.chunk.count));
    record_.stream = stream;
  }
  bool test(Direction d, int32_t chunk) override {
    record_.calls.push_back(name("test", d, chunk, 0));
    return record_.done;
  }
  void wait(Direction d, int32_t chunk) override { record_.calls.push_back(name("wait", d, chunk, 0)); }
  bool drain(const basp::detail::Deadline&) override {
    record_.calls.push_back("drain");
    return record_.drained;
  }
  int64_t workspace_bytes() const override { return 0; }
  basp_path_t plan_path() const override { return BASP_PATH_NONE; }
  basp_path_t last_path() const override { return BASP_PATH_NONE; }
  int32_t last_control_rounds() const override { return 0; }

 private:
  static std::string name(const char* what, Direction d, int32_t chunk, int32_t count) {
    return std::string(what) + (d == Direction::kScatter ? " scatter " : " gather ") + std::to_string(chunk) +
           (count > 0 ? "/" + std::to_string(count) : "");
  }
  basp::plan::ExchangePlan plan_;
  Record& record_;
  basp::transport::ExecuteNeeds needs_{false, true, "DOUBLE"};  // host pointers pass; a stream is taken
};

struct Fixture {
  Record record;
  std::shared_ptr<basp::runtime::Comm> comm;
  std::shared_ptr<basp::runtime::Plan> plan;
  std::vector<float> seq = std::vector<float>(2 * 4 * 4 * 8, 1.0f), head = std::vector<float>(2 * 4 * 4 * 8, 0.0f);
  const void* in[1] = {seq.data()};
  void* out[1] = {head.data()};
  int stream_object = 0;
  void* stream = &stream_object;

  Fixture() {
    basp::runtime::CommOptions options;
    options.micro_batch = 2;
    options.backend = BASP_BACKEND_NCCL;
    options.timeout_ms = 1000;
    basp::plan::GroupLayout layout = basp::runtime::plan_groups(1, options);
    comm = std::make_shared<basp::runtime::Comm>(std::move(layout), 0, options, std::make_unique<NoTransport>());
    basp::plan::ExchangeSpec spec;
    spec.layout = BASP_LAYOUT_BSHD;
    spec.dtype = BASP_DTYPE_FP32;
    spec.elem_size = 4;
    spec.seq_len = 4;
    spec.num_heads = {4};
    spec.split_heads = {4};
    spec.head_dims = {8};
    basp::plan::ExchangePlan exchange = basp::plan::make_exchange_plan(spec, 1, 0, 2);
    auto executor = std::make_unique<DeviceChunksDouble>(exchange, record);
    plan = std::make_shared<basp::runtime::Plan>(comm, exchange, std::move(executor), -1, 0);
  }
  void start(int32_t c, int32_t count) { plan->start(Direction::kScatter, c, count, -1, in, out, stream); }
};

basp_status_t status_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const basp::detail::Error& e) {
    return e.status();
  }
  return BASP_SUCCESS;
}

}  // namespace

TEST_CASE("device-ordered chunks: start enqueues at once, test and wait go to the executor", "[stream_chunks]") {
  Fixture f;
  REQUIRE(basp::plan::max_head_chunks(f.plan->exchange()) == 4);
  f.start(0, 2);
  CHECK(f.record.calls == std::vector<std::string>{"start scatter 0/2"});
  CHECK(f.record.stream == f.stream);
  CHECK(f.comm->progress().idle());  // nothing was queued on the progress thread
  CHECK_FALSE(f.plan->test(Direction::kScatter, 0));
  f.record.done = true;
  CHECK(f.plan->test(Direction::kScatter, 0));
  // The rounds' rules hold: chunk 0 is not waited for, the round takes C = 2, a one-call exchange waits.
  CHECK(status_of([&] { f.start(0, 2); }) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([&] { f.start(1, 3); }) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([&] {
          f.plan->execute(Direction::kScatter, basp::runtime::Plan::kPlanTokens, f.in, f.out, f.stream);
        }) == BASP_ERROR_INVALID_ARGUMENT);
  f.start(1, 2);
  f.plan->wait(Direction::kScatter, 1);
  f.plan->wait(Direction::kScatter, 0);
  CHECK(status_of([&] { f.plan->wait(Direction::kScatter, 0); }) == BASP_ERROR_INVALID_ARGUMENT);  // waited once
  f.start(0, 1);                                                                                   // a new round
  f.plan->wait(Direction::kScatter, 0);
  f.plan->execute(Direction::kScatter, basp::runtime::Plan::kPlanTokens, f.in, f.out, f.stream);
  const std::vector<std::string> want{"start scatter 0/2", "test scatter 0", "test scatter 0",
                                      "start scatter 1/2", "wait scatter 1", "wait scatter 0",
                                      "start scatter 0/1", "wait scatter 0", "execute scatter 0/1"};
  CHECK(f.record.calls == want);
  f.plan->drain();  // nothing in flight: the executor is not asked
  CHECK(f.record.calls.size() == want.size());
}

TEST_CASE("device-ordered chunks: destroy drains them; past the timeout TIMEOUT and a broken comm", "[stream_chunks]") {
  Fixture ended;
  ended.start(0, 2);
  ended.plan->drain();
  CHECK(ended.record.calls.back() == "drain");
  CHECK_NOTHROW(ended.comm->check_usable());

  Fixture hung;
  hung.start(0, 2);
  hung.start(1, 2);
  hung.record.drained = false;
  try {
    hung.plan->drain();
    FAIL("drain of chunks still in flight must fail");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_TIMEOUT);
    CHECK(std::string(e.what()).find("communicator was aborted") != std::string::npos);
  }
  CHECK(status_of([&] { hung.comm->check_usable(); }) == BASP_ERROR_COMM_BROKEN);
  CHECK(status_of([&] { hung.plan->wait(Direction::kScatter, 0); }) == BASP_ERROR_INVALID_ARGUMENT);  // freed
}
