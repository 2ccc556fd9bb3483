// The two real machines recorded by the hwloc project, read from ../shared/fixtures/hwloc at run time (never
// copied into the repository). The CTest entry topology_recorded reports "skipped" when they are absent. Expected
// groups come from the facts of the recordings (their README, and their PCI trees read by hand).
#include <catch2/catch.hpp>

#include <set>

#include "plan/placement.h"
#include "topology_fixtures.h"

using basp::test::as_set;
using basp::test::groups;
using basp::test::GroupSet;
using basp::test::recorded;
using basp::test::world;
using basp::topology::Topology;

TEST_CASE("POWER8 Minsky: K=2 gives its two NVLink pairs", "[recorded]") {
  const Topology t = Topology::load_xml(recorded("power8gpudistances.xml"));
  REQUIRE(t.num_gpus() == 4);
  REQUIRE(t.has_nvlink_info());
  // README: nvml0-nvml1 and nvml2-nvml3 at 40000 MB/s; the GPUs' links to their CPU package connect no GPU pair.
  REQUIRE(t.bandwidth(0, 1) == 40000);
  REQUIRE(t.bandwidth(2, 3) == 40000);
  for (auto [a, b] : {std::pair{0, 2}, {0, 3}, {1, 2}, {1, 3}}) REQUIRE(t.bandwidth(a, b) == 0);
  REQUIRE(as_set(groups(world(t, 1, false), 2)) == GroupSet{{0, 1}, {2, 3}});
  // Also when the ranks take the GPUs in another order: ranks 0..3 on GPUs 0, 2, 1, 3.
  REQUIRE(as_set(groups(world(t, 1, false, {0, 2, 1, 3}), 2)) == GroupSet{{0, 2}, {1, 3}});
}

TEST_CASE("DGX-2: all 16 GPUs connected through NVSwitch, ties broken by the PCIe tree", "[recorded]") {
  const Topology t = Topology::load_xml(recorded("nvidiaDGX2.xml"));
  REQUIRE(t.num_gpus() == 16);
  // README: after merging the switch ports every GPU pair is connected; 6 links of 25000 MB/s per GPU.
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) REQUIRE(t.bandwidth(a, b) == (a == b ? 0u : 150000u));
  }
  // The file's PCIe tree: nvml(2i) and nvml(2i+1) share a PCIe switch, quads 0-3, 4-7, 8-11, 12-15 share the
  // next level, GPUs 0-7 sit on package 0 and 8-15 on package 1. Ranks take the GPUs interleaved so that rank
  // order alone would choose differently.
  std::vector<int32_t> gpu_of;
  for (int i = 0; i < 8; ++i) {
    gpu_of.push_back(i);
    gpu_of.push_back(i + 8);
  }
  const auto ranks = world(t, 1, false, gpu_of);
  auto by_gpu = [&](const std::vector<std::vector<int32_t>>& g) { return basp::test::gpu_sets(g, gpu_of); };
  std::set<std::set<int32_t>> pairs, quads, halves;
  for (int i = 0; i < 16; i += 2) pairs.insert({i, i + 1});
  for (int i = 0; i < 16; i += 4) quads.insert({i, i + 1, i + 2, i + 3});
  halves = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  REQUIRE(by_gpu(groups(ranks, 8)) == pairs);
  REQUIRE(by_gpu(groups(ranks, 4)) == quads);
  REQUIRE(by_gpu(groups(ranks, 2)) == halves);
}
