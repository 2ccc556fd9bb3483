// BASP_DEBUG logging (common/log.h): the levels BASP_DEBUG takes, the "host:pid:rank" prefix, BASP_DEBUG_FILE's
// %h and %p, and that a site formats nothing while logging is off.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace blog = basp::log;

namespace {

std::string host() {
  char h[HOST_NAME_MAX + 1] = {};
  gethostname(h, sizeof(h) - 1);
  return h[0] ? h : "localhost";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void reset() {
  unsetenv("BASP_DEBUG");
  unsetenv("BASP_DEBUG_FILE");
  blog::configure();
  blog::set_rank(-1);
}

}  // namespace

TEST_CASE("log: BASP_DEBUG levels", "[log]") {
  bool ok = false;
  CHECK(blog::parse_level("", &ok) == blog::Level::kOFF);
  CHECK(ok);
  CHECK(blog::parse_level("OFF", &ok) == blog::Level::kOFF);
  CHECK(blog::parse_level("WARN", &ok) == blog::Level::kWARN);
  CHECK(blog::parse_level("INFO", &ok) == blog::Level::kINFO);
  CHECK(blog::parse_level("TRACE", &ok) == blog::Level::kTRACE);
  CHECK(ok);
  blog::parse_level("info", &ok);
  CHECK_FALSE(ok);

  setenv("BASP_DEBUG", "INFO", 1);
  blog::configure();
  CHECK(blog::enabled(blog::Level::kWARN));
  CHECK(blog::enabled(blog::Level::kINFO));
  CHECK_FALSE(blog::enabled(blog::Level::kTRACE));
  setenv("BASP_DEBUG", "VERBOSE", 1);
  try {
    blog::configure();
    FAIL("BASP_DEBUG=VERBOSE accepted");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("BASP_DEBUG (VERBOSE)"));
  }
  reset();
  CHECK_FALSE(blog::enabled(blog::Level::kWARN));
}

TEST_CASE("log: the host:pid:rank prefix and BASP_DEBUG_FILE's %h and %p", "[log]") {
  const std::string pid = std::to_string(getpid());
  CHECK(blog::prefix(-1) == host() + ":" + pid + ":?");
  CHECK(blog::prefix(3) == host() + ":" + pid + ":3");
  CHECK(blog::expand_path("/tmp/basp.%h.%p.log") == "/tmp/basp." + host() + "." + pid + ".log");
  CHECK(blog::expand_path("a%%b%x%") == "a%b%x%");

  const std::string pattern = "/tmp/basp_test_log.%p.%h.log";
  const std::string path = blog::expand_path(pattern);
  std::remove(path.c_str());
  setenv("BASP_DEBUG", "TRACE", 1);
  setenv("BASP_DEBUG_FILE", pattern.c_str(), 1);
  blog::configure();
  blog::set_rank(5);
  BASP_LOG(INFO, "hello ", 42);
  BASP_LOG(TRACE, "traced");
  int formatted = 0;
  setenv("BASP_DEBUG", "WARN", 1);
  blog::configure();
  BASP_LOG(INFO, "not written ", ++formatted);  // off at WARN: the arguments are not even evaluated
  CHECK(formatted == 0);
  const std::string text = slurp(path);
  CHECK(text == host() + ":" + pid + ":5 BASP INFO hello 42\n" + host() + ":" + pid + ":5 BASP TRACE traced\n");
  reset();
  std::remove(path.c_str());
}
