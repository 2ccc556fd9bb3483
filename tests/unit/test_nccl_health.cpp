// The NCCL backend's error handling through the C ABI, with NCCL replaced by a test double: this program defines
// the few NCCL functions a group comm calls (ncclCommGetAsyncError, ncclGetLastError, ncclCommAbort,
// ncclCommDestroy, ncclCommCount, ncclCommUserRank); definitions in the executable take precedence over
// libnccl's, so libbasp's own code (compiled into this program: basp_core, basp_cuda, capi.cpp) talks to the
// double. That lets CI, which has no GPU, check what a real GPU rarely shows on demand: an asynchronous NCCL
// error reported by the query, the comm then broken on every later call, the communicator aborted (never
// destroyed) afterwards, and aborts that succeed or fail. tests/gpu/test_nccl_capi.cpp checks the same API on a
// live NCCL communicator when a GPU is present.
#include <nccl.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "capi/handles.h"
#include "runtime/comm.h"
#include "transport/nccl/nccl_backend.h"

namespace {

struct FakeNccl {
  ncclResult_t async_state = ncclSuccess;   // what ncclCommGetAsyncError reports
  ncclResult_t query_result = ncclSuccess;  // what ncclCommGetAsyncError itself returns
  ncclResult_t abort_result = ncclSuccess;
  std::string last_error;
  int queries = 0;
  int aborts = 0;
  int destroys = 0;
  ncclComm_t released = nullptr;  // the communicator given to the last abort or destroy
};

FakeNccl fake;
int fake_comm_object = 0;
const ncclComm_t kFakeComm = reinterpret_cast<ncclComm_t>(&fake_comm_object);

}  // namespace

extern "C" {
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* async_error) {
  ++fake.queries;
  if (fake.query_result != ncclSuccess) return fake.query_result;
  *async_error = fake.async_state;
  return ncclSuccess;
}
const char* ncclGetLastError(ncclComm_t) { return fake.last_error.c_str(); }
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ++fake.aborts;
  fake.released = comm;
  return fake.abort_result;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ++fake.destroys;
  fake.released = comm;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t, int* count) {
  *count = 1;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t, int* rank) {
  *rank = 0;
  return ncclSuccess;
}
}

namespace {

// A one-rank NCCL-backend comm on the double, registered as a C handle like basp_comm_create_nccl's.
basp_comm_t make_handle() {
  fake = FakeNccl{};
  basp::runtime::CommOptions options;
  options.micro_batch = 2;
  options.backend = BASP_BACKEND_NCCL;
  basp::plan::GroupLayout layout = basp::runtime::plan_groups(1, options);
  auto transport =
      basp::transport::nccl::wrap_group(kFakeComm, 0, basp::runtime::group_spec(layout, 0, options.timeout_ms));
  auto handle = std::make_unique<basp_comm>();
  handle->impl = std::make_shared<basp::runtime::Comm>(std::move(layout), 0, options, std::move(transport));
  basp::capi::register_comm(handle.get());
  return handle.release();
}

std::string last() { return basp_last_error(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

basp_status_t query(basp_comm_t comm) {
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  return basp_comm_query(comm, -1, 16, &info);
}

}  // namespace

TEST_CASE("a healthy NCCL comm: no async error, usable, destroyed with ncclCommDestroy", "[nccl]") {
  basp_comm_t comm = make_handle();
  basp_status_t error = BASP_ERROR_INTERNAL;
  char message[256] = "stale";
  REQUIRE(basp_comm_get_async_error(comm, &error, message, sizeof(message)) == BASP_SUCCESS);
  CHECK(error == BASP_SUCCESS);
  CHECK(std::string(message).empty());
  CHECK(fake.queries == 1);
  CHECK(query(comm) == BASP_SUCCESS);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.destroys == 1);
  CHECK(fake.aborts == 0);
  CHECK(fake.released == kFakeComm);
}

TEST_CASE("ncclInProgress (a non-blocking operation still running) is not an error", "[nccl]") {
  basp_comm_t comm = make_handle();
  fake.async_state = ncclInProgress;
  basp_status_t error = BASP_ERROR_INTERNAL;
  REQUIRE(basp_comm_get_async_error(comm, &error, nullptr, 0) == BASP_SUCCESS);
  CHECK(error == BASP_SUCCESS);
  CHECK(query(comm) == BASP_SUCCESS);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.destroys == 1);
  CHECK(fake.aborts == 0);
}

TEST_CASE("an asynchronous NCCL error breaks the comm, names NCCL's error, and the comm is aborted at destroy",
          "[nccl]") {
  basp_comm_t comm = make_handle();
  fake.async_state = ncclRemoteError;
  fake.last_error = "peer 3 closed its connection";
  basp_status_t error = BASP_SUCCESS;
  char message[256] = {};
  REQUIRE(basp_comm_get_async_error(comm, &error, message, sizeof(message)) == BASP_SUCCESS);
  CHECK(error == BASP_ERROR_NCCL);
  CHECK(contains(message, ncclGetErrorString(ncclRemoteError)));
  CHECK(contains(message, "peer 3 closed its connection"));

  // Every later call fails at once, naming the cause.
  CHECK(query(comm) == BASP_ERROR_COMM_BROKEN);
  CHECK(contains(last(), "peer 3 closed its connection"));
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.seq_len = 16;
  desc.head_dim = 8;
  desc.num_heads[0] = 4;
  basp_plan_t plan = reinterpret_cast<basp_plan_t>(&fake_comm_object);
  CHECK(basp_plan_create(comm, &desc, &plan) == BASP_ERROR_COMM_BROKEN);
  CHECK(plan == nullptr);

  // The query keeps reporting the first error, without asking NCCL again; a small buffer gets a prefix.
  const int queries = fake.queries;
  fake.async_state = ncclSuccess;
  char small[8] = {};
  error = BASP_SUCCESS;
  REQUIRE(basp_comm_get_async_error(comm, &error, small, sizeof(small)) == BASP_SUCCESS);
  CHECK(error == BASP_ERROR_NCCL);
  CHECK(std::string(small) == std::string(message).substr(0, sizeof(small) - 1));
  CHECK(fake.queries == queries);

  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.aborts == 1);    // NCCL requires an abort after an asynchronous error
  CHECK(fake.destroys == 0);  // ncclCommDestroy could wait forever on the failed work
  CHECK(fake.released == kFakeComm);
}

TEST_CASE("abort: once, the comm broken naming the abort, never destroyed afterwards", "[nccl]") {
  basp_comm_t comm = make_handle();
  REQUIRE(basp_comm_abort(comm) == BASP_SUCCESS);
  CHECK(fake.aborts == 1);
  CHECK(fake.released == kFakeComm);
  CHECK(query(comm) == BASP_ERROR_COMM_BROKEN);
  CHECK(contains(last(), "aborted"));
  basp_status_t error = BASP_SUCCESS;
  char message[128] = {};
  REQUIRE(basp_comm_get_async_error(comm, &error, message, sizeof(message)) == BASP_SUCCESS);
  CHECK(error == BASP_ERROR_NCCL);
  CHECK(contains(message, "aborted"));
  CHECK(fake.queries == 0);                        // an aborted communicator is not queried
  REQUIRE(basp_comm_abort(comm) == BASP_SUCCESS);  // a second abort does nothing
  CHECK(fake.aborts == 1);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.aborts == 1);
  CHECK(fake.destroys == 0);
  CHECK(basp_comm_abort(comm) == BASP_ERROR_INVALID_HANDLE);
}

TEST_CASE("an abort that NCCL fails is reported, and the comm is broken all the same", "[nccl]") {
  basp_comm_t comm = make_handle();
  fake.abort_result = ncclInternalError;
  fake.last_error = "proxy thread did not stop";
  CHECK(basp_comm_abort(comm) == BASP_ERROR_NCCL);
  CHECK(contains(last(), "proxy thread did not stop"));
  CHECK(query(comm) == BASP_ERROR_COMM_BROKEN);
  CHECK(contains(last(), "aborted"));
  fake.abort_result = ncclSuccess;
  CHECK(basp_comm_abort(comm) == BASP_SUCCESS);  // not attempted twice
  CHECK(fake.aborts == 1);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.destroys == 0);
}

TEST_CASE("the async-error query failing in NCCL is reported and writes no error code", "[nccl]") {
  basp_comm_t comm = make_handle();
  fake.query_result = ncclInvalidUsage;
  basp_status_t error = BASP_ERROR_INTERNAL;
  CHECK(basp_comm_get_async_error(comm, &error, nullptr, 0) == BASP_ERROR_NCCL);
  CHECK(error == BASP_ERROR_INTERNAL);
  CHECK(contains(last(), ncclGetErrorString(ncclInvalidUsage)));
  CHECK(query(comm) == BASP_SUCCESS);  // a failed query says nothing about the communicator
  fake.query_result = ncclSuccess;
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.destroys == 1);
  CHECK(fake.aborts == 0);
}

TEST_CASE("a communicator with an async error that nobody queried is aborted, not destroyed", "[nccl]") {
  basp_comm_t comm = make_handle();
  CHECK(query(comm) == BASP_SUCCESS);
  fake.async_state = ncclUnhandledCudaError;
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.aborts == 1);
  CHECK(fake.destroys == 0);
  CHECK(fake.released == kFakeComm);
}

TEST_CASE("a watchdog thread polling while another thread aborts", "[nccl]") {
  basp_comm_t comm = make_handle();
  fake.async_state = ncclSuccess;
  std::vector<basp_status_t> seen;
  std::atomic<int> polled{0};
  // Polls until it has seen the abort 100 times (or 10 s passed: then the checks below fail).
  std::thread watchdog([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int after_abort = 0;
    while (after_abort < 100 && std::chrono::steady_clock::now() < give_up) {
      basp_status_t error = BASP_ERROR_INTERNAL;
      if (basp_comm_get_async_error(comm, &error, nullptr, 0) != BASP_SUCCESS) error = BASP_ERROR_INTERNAL;
      seen.push_back(error);
      if (error == BASP_ERROR_NCCL) ++after_abort;
      polled.fetch_add(1);
    }
  });
  while (polled.load() < 10) std::this_thread::yield();  // the abort comes while the watchdog is polling
  REQUIRE(basp_comm_abort(comm) == BASP_SUCCESS);
  watchdog.join();
  REQUIRE(seen.size() >= 110);
  CHECK(seen.front() == BASP_SUCCESS);
  CHECK(seen.back() == BASP_ERROR_NCCL);
  // Before the abort: no error; after it: BASP_ERROR_NCCL; never anything else, and never back to no error.
  bool after = false;
  bool consistent = true;
  for (basp_status_t s : seen) {
    if (s == BASP_ERROR_NCCL)
      after = true;
    else if (s != BASP_SUCCESS || after)
      consistent = false;
  }
  CHECK(consistent);
  basp_status_t error = BASP_SUCCESS;
  REQUIRE(basp_comm_get_async_error(comm, &error, nullptr, 0) == BASP_SUCCESS);
  CHECK(error == BASP_ERROR_NCCL);
  CHECK(fake.aborts == 1);
  REQUIRE(basp_comm_destroy(comm) == BASP_SUCCESS);
  CHECK(fake.destroys == 0);
}

// The deadline of NCCL exchanges (transport/nccl/exchange_watch.h): what it concludes from the last exchange's
// event and age. A hung exchange is overdue only past the timeout, never with timeout 0, never once it ended.
TEST_CASE("the exchange watch: idle, running, ended, failed, overdue", "[nccl][timeout]") {
  using basp::transport::nccl::watch_verdict;
  using V = basp::transport::nccl::WatchVerdict;
  CHECK(watch_verdict(false, cudaErrorNotReady, 1000000, 10) == V::kIdle);
  CHECK(watch_verdict(true, cudaSuccess, 1000000, 10) == V::kEnded);
  CHECK(watch_verdict(true, cudaErrorNotReady, 10, 10) == V::kRunning);
  CHECK(watch_verdict(true, cudaErrorNotReady, 11, 10) == V::kOverdue);
  CHECK(watch_verdict(true, cudaErrorNotReady, 1000000, 0) == V::kRunning);  // timeout 0: wait for ever
  CHECK(watch_verdict(true, cudaErrorLaunchFailure, 0, 10) == V::kFailed);
}

// BASP_CHECK_EXCHANGES: 0 or 1, anything else refused naming the variable and the value; the old name still works.
TEST_CASE("BASP_CHECK_EXCHANGES: 0 or 1, else INVALID_ARGUMENT naming it", "[nccl][env]") {
  using basp::transport::nccl::check_exchanges_from_env;
  unsetenv("BASP_CHECK_EXCHANGES");
  unsetenv("BASP_CHECK_TOKENS");
  CHECK_FALSE(check_exchanges_from_env());
  setenv("BASP_CHECK_EXCHANGES", "1", 1);
  CHECK(check_exchanges_from_env());
  setenv("BASP_CHECK_EXCHANGES", "0", 1);
  CHECK_FALSE(check_exchanges_from_env());
  setenv("BASP_CHECK_EXCHANGES", "yes", 1);
  try {
    check_exchanges_from_env();
    FAIL("BASP_CHECK_EXCHANGES=yes was accepted");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("BASP_CHECK_EXCHANGES (yes)") && Catch::Contains("0 or 1"));
  }
  unsetenv("BASP_CHECK_EXCHANGES");
  setenv("BASP_CHECK_TOKENS", "1", 1);  // the name before 0.6
  CHECK(check_exchanges_from_env());
  unsetenv("BASP_CHECK_TOKENS");
}
