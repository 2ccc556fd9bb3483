// libFuzzer target: `basp-topo --import FILE`: a hwloc XML topology read by Topology::load_xml, then everything
// basp-topo does with it: the report, each GPU's rank record, placement of one rank per GPU into groups and the
// groups report. Expected: BASP_ERROR_INVALID_ARGUMENT for a file that is not a topology, never a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "plan/groups.h"
#include "runtime/comm.h"
#include "tools/topo_report.h"
#include "topology/rank_locality.h"
#include "topology/topology.h"

namespace {

std::string g_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("TMPDIR");
  g_path = std::string(dir && *dir ? dir : "/tmp") + "/basp-fuzz-topo-" + std::to_string(getpid()) + ".xml";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(g_path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    const auto topo = basp::topology::Topology::load_xml(g_path);
    const std::string report = basp::tools::topology_report(topo);
    std::vector<basp::topology::RankLocality> ranks;
    const int32_t n = std::min<int32_t>(topo.num_gpus(), 64);
    for (int32_t g = 0; g < n; ++g) ranks.push_back(basp::topology::make_rank_locality(topo, g));
    if (!ranks.empty()) {
      for (int64_t b : {int64_t{1}, int64_t{2}, static_cast<int64_t>(n)}) {
        basp::runtime::CommOptions options;
        options.micro_batch = b;
        options.placement = BASP_PLACEMENT_TOPOLOGY;
        const auto layout = basp::runtime::plan_groups(n, options, ranks);
        const std::string groups = basp::tools::groups_report(layout, ranks, "topology");
        if (groups.empty()) std::abort();
      }
      if (basp::tools::ranks_report(ranks).empty()) std::abort();
    }
  } catch (const basp::detail::Error& e) {
    if (e.status() == BASP_SUCCESS) std::abort();
  }
  return 0;
}
