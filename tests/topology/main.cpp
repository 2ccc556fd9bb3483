// Runner of basp_topology_tests. Two flags of its own, taken before Catch2 sees the rest, make a missing
// prerequisite a CTest "skipped" (exit 77) instead of a pass:
//   --require-hwloc     the build has hwloc (fixtures are hwloc XML)
//   --require-recorded  the recorded machines of ../shared/fixtures/hwloc are present
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "basp/config.h"
#include "topology_fixtures.h"

int main(int argc, char** argv) {
  constexpr int kSkipped = 77;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-hwloc") == 0) {
      if (!BASP_HAVE_HWLOC) {
        std::printf("SKIPPED: this build has no hwloc (BASP_ENABLE_HWLOC): the XML fixtures cannot be read\n");
        return kSkipped;
      }
    } else if (std::strcmp(argv[i], "--require-recorded") == 0) {
      struct stat st {};
      const std::string dir = basp::test::recorded_dir();
      if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        std::printf("SKIPPED: the recorded hwloc topologies are absent (%s)\n", dir.c_str());
        return kSkipped;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
