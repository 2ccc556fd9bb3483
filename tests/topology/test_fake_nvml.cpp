// Discovery through NVML on a machine without a driver: the CTest entries topology_fake_nvml_* put the stand-in
// library of fake_nvml.c first on LD_LIBRARY_PATH and choose its machine with BASP_FAKE_NVML_MODE. hwloc sees
// none of those GPUs here, so the topology is NVML's view alone.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "topology/nvml_probe.h"
#include "topology_fixtures.h"

using basp::test::as_set;
using basp::test::groups;
using basp::test::GroupSet;
using basp::topology::Topology;

namespace {

std::string fake_mode() {
  const char* m = std::getenv("BASP_FAKE_NVML_MODE");
  return m ? m : "";
}

void require_fake_library() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  const bool fake = dlsym(lib, "basp_fake_nvml_marker") != nullptr;
  dlclose(lib);
  REQUIRE(fake);  // the real NVML must not answer these tests
}

}  // namespace

TEST_CASE("fake NVML: GB200-like tray through NVSwitches, one fabric domain", "[fake-nvml][switch]") {
  REQUIRE(fake_mode() == "switch");
  require_fake_library();
  const basp::topology::NvmlReport report = basp::topology::probe_nvml();
  REQUIRE(report.available);
  REQUIRE(report.gpus.size() == 4);
  REQUIRE(report.gpus[0].links.size() == 18);
  REQUIRE(report.gpus[0].fabric_registered);
  const Topology t = Topology::discover();
  REQUIRE(t.link_source() == basp::topology::LinkSource::kNvml);
  REQUIRE(t.num_gpus() == 4);
  REQUIRE(t.gpus()[1].pci_bus_id == "0000:0f:00.0");
  REQUIRE(t.gpus()[1].model == "Fake GB200");
  for (int a = 0; a < 4; ++a) {
    REQUIRE(t.gpus()[static_cast<size_t>(a)].domain_name == "5c4f3b1e-9a27-4d68-8b0f-2e7d6c5a4b39/5");
    for (int b = 0; b < 4; ++b) REQUIRE(t.bandwidth(a, b) == (a == b ? 0u : 18u * 50000u));
  }
  REQUIRE(t.find_gpu("00000000:47:00.0") == 2);
  // 3 pretended trays of this one: K=4 keeps each tray whole, and all share one NVLink domain.
  const auto ranks = basp::test::world(t, 3, /*cyclic=*/true);
  for (const auto& r : ranks) REQUIRE(r.domain_key == ranks[0].domain_key);
  REQUIRE(as_set(groups(ranks, 3)) == GroupSet{{0, 3, 6, 9}, {1, 4, 7, 10}, {2, 5, 8, 11}});
}

TEST_CASE("fake NVML: bridged pairs, a CPU link, and links beyond the architecture's count", "[fake-nvml][bridge]") {
  REQUIRE(fake_mode() == "bridge");
  require_fake_library();
  const Topology t = Topology::discover();
  REQUIRE(t.link_source() == basp::topology::LinkSource::kNvml);
  REQUIRE(t.num_gpus() == 4);
  const uint32_t bridge = 4 * basp::topology::link_bandwidth_for(8, 6);
  for (int a = 0; a < 4; ++a) {
    REQUIRE(t.gpus()[static_cast<size_t>(a)].domain_key == 0);
    for (int b = 0; b < 4; ++b) {
      INFO("GPU" << a << " - GPU" << b);
      REQUIRE(t.bandwidth(a, b) == ((a ^ 1) == b ? bridge : 0u));
    }
  }
  // Ranks on GPUs 0, 2, 1, 3: the bridges decide, not the rank order.
  const auto ranks = basp::test::world(t, 1, false, {0, 2, 1, 3});
  REQUIRE(as_set(groups(ranks, 2)) == GroupSet{{0, 2}, {1, 3}});
}

TEST_CASE("fake NVML: a failing nvmlInit means no NVLink information", "[fake-nvml][initfail]") {
  REQUIRE(fake_mode() == "initfail");
  require_fake_library();
  const Topology t = Topology::discover();
  REQUIRE_FALSE(t.has_nvlink_info());
  REQUIRE_THAT(t.link_status(),
               Catch::StartsWith("no NVLink information") && Catch::Contains("nvmlInit_v2 failed: Driver Not Loaded"));
  REQUIRE(t.num_gpus() == 0);
}
