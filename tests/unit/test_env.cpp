// The environment reader (common/env.h): every knob's default, its valid values and the message of an invalid one
// (naming the variable and the value); and README.md's "Environment variables" table lists exactly the table's
// knobs (a deprecated alias in the row of the knob it stands for), so that a knob added without its row fails here.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "runtime/pointer_check.h"
#include "runtime/timeout.h"
#include "topology/node_identity.h"

namespace env = basp::env;

namespace {

// Every knob unset for the duration of a test, restored after.
struct CleanEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  CleanEnv() {
    for (const env::Knob& k : env::knobs()) {
      if (const char* v = std::getenv(k.name)) saved.emplace_back(k.name, v);
      unsetenv(k.name);
    }
  }
  ~CleanEnv() {
    for (const env::Knob& k : env::knobs()) unsetenv(k.name);
    for (const auto& [name, value] : saved) setenv(name.c_str(), value.c_str(), 1);
  }
};

template <typename F>
void check_invalid(const char* name, const char* value, F&& read) {
  INFO(name << "=" << value);
  setenv(name, value, 1);
  try {
    read();
    FAIL("accepted");
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains(std::string(name) + " (" + value + ")"));
  }
  unsetenv(name);
}

// The variables of README's table: the first `NAME` of each row of the "## Environment variables" section.
std::vector<std::pair<std::string, std::string>> readme_rows(const std::string& readme) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream in(readme);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Environment variables";
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    if (end != std::string::npos) rows.emplace_back(line.substr(3, end - 3), line);
  }
  return rows;
}

// What differs between README's table and env::knobs(); empty when they agree.
std::string table_problems(const std::string& readme) {
  std::string problems;
  std::set<std::string> listed;
  std::string all_rows;
  for (const auto& [name, row] : readme_rows(readme)) {
    listed.insert(name);
    all_rows += row + "\n";
    bool known = false;
    for (const env::Knob& k : env::knobs()) known = known || (name == k.name && k.alias_of == nullptr);
    if (!known) problems += "README lists " + name + ", which is not a knob of src/common/env.cpp\n";
  }
  for (const env::Knob& k : env::knobs()) {
    if (k.alias_of == nullptr && listed.count(k.name) == 0) problems += std::string("README lacks ") + k.name + "\n";
    if (k.alias_of != nullptr && all_rows.find(std::string("`") + k.name) == std::string::npos) {
      problems += std::string("README does not name the alias ") + k.name + " in " + k.alias_of + "'s row\n";
    }
  }
  return problems;
}

std::string read_readme() {
  // The repository's root from the build (not __FILE__, which a compiler launcher such as ccache may make relative).
  const std::string path = std::string(BASP_SOURCE_DIR) + "/README.md";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("env: the table's defaults", "[env]") {
  CleanEnv clean;
  CHECK(env::get_enum("BASP_MPI_TRANSPORT") == "auto");
  CHECK(env::get_bool("BASP_CHECK_POINTERS"));
  CHECK(basp::runtime::pointer_checks_enabled());
  CHECK(env::get_int("BASP_TIMEOUT_MS") == BASP_DEFAULT_TIMEOUT_MS);
  CHECK(basp::runtime::resolve_timeout_ms(-1) == BASP_DEFAULT_TIMEOUT_MS);
  CHECK(env::get_string("BASP_NODE_ID").empty());
  CHECK(basp::topology::local_node_identity().source == std::string("hostname+boot_id"));
  CHECK_FALSE(env::get_bool("BASP_CHECK_EXCHANGES"));
  CHECK_FALSE(env::get_bool("BASP_CHECK_TOKENS"));
  CHECK(env::get_enum("BASP_DEBUG") == "OFF");
  CHECK(env::get_string("BASP_DEBUG_FILE").empty());
  // Empty is unset.
  for (const env::Knob& k : env::knobs()) {
    setenv(k.name, "", 1);
    CHECK(env::allowed(k, ""));
  }
  CHECK(env::get_enum("BASP_MPI_TRANSPORT") == "auto");
  CHECK(env::get_int("BASP_TIMEOUT_MS") == BASP_DEFAULT_TIMEOUT_MS);
  CHECK(env::get_bool("BASP_CHECK_POINTERS"));
}

TEST_CASE("env: valid values", "[env]") {
  CleanEnv clean;
  for (const char* v : {"auto", "p2p", "cma", "staged", "direct"}) {
    setenv("BASP_MPI_TRANSPORT", v, 1);
    CHECK(env::get_enum("BASP_MPI_TRANSPORT") == v);
  }
  setenv("BASP_CHECK_POINTERS", "0", 1);
  CHECK_FALSE(basp::runtime::pointer_checks_enabled());
  setenv("BASP_CHECK_POINTERS", "1", 1);
  CHECK(basp::runtime::pointer_checks_enabled());
  for (const char* v : {"0", "1", "2500", "2592000000"}) {
    setenv("BASP_TIMEOUT_MS", v, 1);
    CHECK(basp::runtime::resolve_timeout_ms(-1) == std::stoll(v));
  }
  CHECK(env::knob("BASP_TIMEOUT_MS").max == basp::runtime::kMaxTimeoutMs);
  setenv("BASP_NODE_ID", "rack7-node3", 1);
  CHECK(basp::topology::local_node_identity().name == "rack7-node3");
  CHECK(basp::topology::local_node_identity().source == std::string("BASP_NODE_ID"));
  for (const char* name : {"BASP_CHECK_EXCHANGES", "BASP_CHECK_TOKENS"}) {
    setenv(name, "1", 1);
    CHECK(env::get_bool(name));
    setenv(name, "0", 1);
    CHECK_FALSE(env::get_bool(name));
  }
  CHECK(std::string(env::knob("BASP_CHECK_TOKENS").alias_of) == "BASP_CHECK_EXCHANGES");
  for (const char* v : {"OFF", "WARN", "INFO", "TRACE"}) {
    setenv("BASP_DEBUG", v, 1);
    CHECK(env::get_enum("BASP_DEBUG") == v);
  }
  setenv("BASP_DEBUG_FILE", "/tmp/basp.%h.%p.log", 1);
  CHECK(env::get_string("BASP_DEBUG_FILE") == "/tmp/basp.%h.%p.log");
}

TEST_CASE("env: a value outside the set is INVALID_ARGUMENT naming variable and value", "[env]") {
  CleanEnv clean;
  for (const char* v : {"AUTO", "shared", "p2p "}) {
    check_invalid("BASP_MPI_TRANSPORT", v, [] { env::get_enum("BASP_MPI_TRANSPORT"); });
  }
  for (const char* v : {"yes", "true", "2", "on"}) {
    check_invalid("BASP_CHECK_POINTERS", v, [] { basp::runtime::pointer_checks_enabled(); });
    check_invalid("BASP_CHECK_EXCHANGES", v, [] { env::get_bool("BASP_CHECK_EXCHANGES"); });
    // The old name is a 0/1 knob of the table too: "true" is refused, no longer silently off.
    check_invalid("BASP_CHECK_TOKENS", v, [] { env::get_bool("BASP_CHECK_TOKENS"); });
  }
  for (const char* v : {"5s", "-1", "1e3", " 12", "2592000001", "99999999999999999999"}) {
    check_invalid("BASP_TIMEOUT_MS", v, [] { basp::runtime::resolve_timeout_ms(-1); });
  }
  for (const char* v : {"info", "DEBUG", "1", "VERSION"}) {
    check_invalid("BASP_DEBUG", v, [] { env::get_enum("BASP_DEBUG"); });
  }
  // The message says what would have been accepted.
  setenv("BASP_MPI_TRANSPORT", "shm", 1);
  try {
    env::get_enum("BASP_MPI_TRANSPORT");
  } catch (const basp::detail::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("must be auto, p2p, cma, staged or direct (default auto)"));
  }
  CHECK_THROWS_AS(env::knob("BASP_NO_SUCH_KNOB"), basp::detail::Error);
}

TEST_CASE("env: every knob has a type, a doc, and a default in its own set", "[env]") {
  CleanEnv clean;
  for (const env::Knob& k : env::knobs()) {
    INFO(k.name);
    CHECK(std::string(k.name).rfind("BASP_", 0) == 0);
    CHECK(std::string(k.doc).size() > 10);
    CHECK(env::allowed(k, k.default_value));
  }
  CHECK(env::describe_table().find("BASP_NODE_ID\tstring") != std::string::npos);
}

TEST_CASE("env: README's table lists exactly the table's variables", "[env][docs]") {
  const std::string readme = read_readme();
  CHECK(table_problems(readme) == "");
  // The check can fail: README without one row, or with an extra one.
  const std::string row = "| `BASP_NODE_ID` |";
  const size_t at = readme.find(row);
  REQUIRE(at != std::string::npos);
  std::string missing = readme;
  missing.erase(at, missing.find('\n', at) + 1 - at);
  CHECK_THAT(table_problems(missing), Catch::Contains("README lacks BASP_NODE_ID"));
  std::string extra = readme;
  extra.insert(at, "| `BASP_NO_SUCH_KNOB` | nothing |\n");
  CHECK_THAT(table_problems(extra), Catch::Contains("README lists BASP_NO_SUCH_KNOB"));
}
