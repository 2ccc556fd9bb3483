// Topology discovery and its use by placement: the project's own fixtures (tests/fixtures/topology, see the
// README there for the facts each models), NVML's link arithmetic on fabricated reports, node identity, XML
// round trips and bad files. Expected groups come from the machines' published facts, not from the code.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "common/error.h"
#include "plan/placement.h"
#include "topology/nvlink_matrix.h"
#include "topology/pci_address.h"
#include "topology_fixtures.h"

using basp::test::as_set;
using basp::test::fixture;
using basp::test::groups;
using basp::test::GroupSet;
using basp::test::world;
using basp::topology::PciAddress;
using basp::topology::Topology;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/basp-topo-test-" + std::to_string(getpid()) + "-" + name;
}

// Same GPUs, links, locality, domains and node: what an export followed by an import must keep.
void require_same(const Topology& a, const Topology& b) {
  REQUIRE(a.num_gpus() == b.num_gpus());
  REQUIRE(a.node().key == b.node().key);
  REQUIRE(a.node().name == b.node().name);
  REQUIRE(a.has_nvlink_info() == b.has_nvlink_info());
  for (int32_t i = 0; i < a.num_gpus(); ++i) {
    const auto& x = a.gpus()[static_cast<size_t>(i)];
    const auto& y = b.gpus()[static_cast<size_t>(i)];
    REQUIRE(x.pci_bus_id == y.pci_bus_id);
    REQUIRE(x.model == y.model);
    REQUIRE(x.numa == y.numa);
    REQUIRE(x.package == y.package);
    REQUIRE(x.cpu_affinity == y.cpu_affinity);
    REQUIRE(x.domain_key == y.domain_key);
    for (int32_t j = 0; j < a.num_gpus(); ++j) {
      REQUIRE(a.bandwidth(i, j) == b.bandwidth(i, j));
      REQUIRE(a.locality(i, j) == b.locality(i, j));
    }
  }
}

void round_trip(const Topology& t, const std::string& name) {
  const std::string path = temp_path(name);
  t.export_xml(path);
  const Topology back = Topology::load_xml(path);
  std::remove(path.c_str());
  require_same(t, back);
}

basp::topology::NvmlGpu nvml_gpu(uint32_t bus, int32_t cc_major) {
  basp::topology::NvmlGpu g;
  g.pci = PciAddress{0, bus, 0, 0};
  g.cc_major = cc_major;
  g.link_bandwidth = basp::topology::link_bandwidth_for(cc_major, 0);
  return g;
}

void add_links(basp::topology::NvmlGpu& g, uint32_t remote_bus, uint32_t vendor, int count) {
  for (int i = 0; i < count; ++i) g.links.push_back({PciAddress{0, remote_bus, 0, 0}, vendor});
}

}  // namespace

TEST_CASE("PCI addresses compare numerically whatever their spelling", "[topology]") {
  PciAddress a, b, c;
  REQUIRE(PciAddress::parse("0000:07:00.0", &a));
  REQUIRE(PciAddress::parse("00000000:07:00.0", &b));
  REQUIRE(PciAddress::parse("07:00.0", &c));
  REQUIRE(a == b);
  REQUIRE(a == c);
  REQUIRE(a.str() == "0000:07:00.0");
  REQUIRE(PciAddress::parse("000A:B7:1f.7", &a));
  REQUIRE(a.str() == "000a:b7:1f.7");
  for (const char* bad : {"", "07:00", "zz:00.0", "0000:07:00.0x", "0000:100:00.0", "0000:07:20.0"}) {
    INFO(bad);
    REQUIRE_FALSE(PciAddress::parse(bad, &a));
  }
}

TEST_CASE("node identity: host name + boot id, or BASP_NODE_ID", "[topology]") {
  const char* saved = std::getenv("BASP_NODE_ID");
  const std::string keep = saved ? saved : "";
  unsetenv("BASP_NODE_ID");
  const auto host = basp::topology::local_node_identity();
  REQUIRE(host.source == "hostname+boot_id");
  REQUIRE(host.key == basp::topology::local_node_identity().key);
  setenv("BASP_NODE_ID", "pretend-node-3", 1);
  const auto fake = basp::topology::local_node_identity();
  REQUIRE(fake.source == "BASP_NODE_ID");
  REQUIRE(fake.name == "pretend-node-3");
  REQUIRE(fake.key != host.key);
  setenv("BASP_NODE_ID", "pretend-node-4", 1);
  REQUIRE(basp::topology::local_node_identity().key != fake.key);
  setenv("BASP_NODE_ID", "", 1);  // empty: as if unset
  REQUIRE(basp::topology::local_node_identity().key == host.key);
  if (saved) {
    setenv("BASP_NODE_ID", keep.c_str(), 1);
  } else {
    unsetenv("BASP_NODE_ID");
  }
  REQUIRE(basp::topology::key_from_hex(basp::topology::key_to_hex(0x0123456789abcdefull), "k") ==
          0x0123456789abcdefull);
  REQUIRE_THROWS_WITH(basp::topology::key_from_hex("xyz", "BaspNodeKey"), Catch::Contains("BaspNodeKey (\"xyz\")"));
}

TEST_CASE("NVML links become hwloc's NVLinkBandwidth matrix", "[topology]") {
  basp::topology::NvmlReport r;
  r.available = true;
  // V100-like: GPU 0x10 has 2 links to 0x20 and 1 to 0x30; GPU 0x20 mirrors; 0x30 has 1 back to 0x10.
  auto g0 = nvml_gpu(0x10, 7), g1 = nvml_gpu(0x20, 7), g2 = nvml_gpu(0x30, 7);
  add_links(g0, 0x20, 0x10de, 2);
  add_links(g0, 0x30, 0x10de, 1);
  add_links(g1, 0x10, 0x10de, 2);
  add_links(g2, 0x10, 0x10de, 1);
  add_links(g2, 0x99, 0x1014, 2);  // IBM NPU: a CPU link, connects no GPU
  r.gpus = {g0, g1, g2};
  const std::vector<PciAddress> order = {g0.pci, g1.pci, g2.pci};
  auto m = basp::topology::nvlink_bandwidth_matrix(r, order);
  REQUIRE(m == std::vector<uint32_t>{0, 50000, 25000, 50000, 0, 0, 25000, 0, 0});

  // NVSwitch systems: A100-like GPUs with 12 links to switches, one with only 6 active links.
  basp::topology::NvmlReport s;
  s.available = true;
  auto a = nvml_gpu(0x07, 8), b = nvml_gpu(0x0f, 8), c = nvml_gpu(0x47, 8);
  add_links(a, 0xc0, 0x10de, 6);
  add_links(a, 0xc1, 0x10de, 6);
  add_links(b, 0xc0, 0x10de, 12);
  add_links(c, 0xc1, 0x10de, 6);
  s.gpus = {a, b, c};
  m = basp::topology::nvlink_bandwidth_matrix(s, {a.pci, b.pci, c.pci});
  REQUIRE(m == std::vector<uint32_t>{0, 300000, 150000, 300000, 0, 150000, 150000, 150000, 0});
  // A GPU NVML knows but the topology does not list is not a switch, and the unlisted GPU gets no row.
  m = basp::topology::nvlink_bandwidth_matrix(r, {g0.pci, g2.pci});
  REQUIRE(m == std::vector<uint32_t>{0, 25000, 25000, 0});
  // Per-architecture constants used above.
  REQUIRE(basp::topology::nvlink_count_for(7, 0) == 6);
  REQUIRE(basp::topology::nvlink_count_for(9, 0) == 18);
  REQUIRE(basp::topology::nvlink_count_for(5, 2) == 0);
}

TEST_CASE("DGX-1 V100: K=4 gives the two fully connected quads, K=2 only double-link pairs", "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("dgx1-v100.xml"));
  REQUIRE(t.num_gpus() == 8);
  REQUIRE(t.link_source() == basp::topology::LinkSource::kRecorded);
  // The DGX-1 V100 hybrid cube mesh: two links (50000 MB/s) or one (25000) or none.
  const std::set<std::pair<int, int>> two = {{0, 3}, {0, 4}, {1, 2}, {1, 5}, {2, 3}, {4, 7}, {5, 6}, {6, 7}};
  const std::set<std::pair<int, int>> one = {{0, 1}, {0, 2}, {1, 3}, {2, 6}, {3, 7}, {4, 5}, {4, 6}, {5, 7}};
  for (int a = 0; a < 8; ++a) {
    for (int b = a + 1; b < 8; ++b) {
      const uint32_t want = two.count({a, b}) ? 50000 : one.count({a, b}) ? 25000 : 0;
      INFO("GPU" << a << " - GPU" << b);
      REQUIRE(t.bandwidth(a, b) == want);
      REQUIRE(t.bandwidth(b, a) == want);
    }
    REQUIRE(t.gpus()[static_cast<size_t>(a)].package == (a < 4 ? 0 : 1));
  }
  // Whatever GPU each rank has: map the expected GPU sets through the rank -> GPU mapping.
  for (const std::vector<int32_t>& gpu_of :
       {std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<int32_t>{7, 0, 6, 1, 5, 2, 4, 3}}) {
    const auto ranks = world(t, 1, false, gpu_of);
    auto gpus_of = [&](const std::vector<int32_t>& members) {
      std::set<int32_t> out;
      for (int32_t r : members) out.insert(gpu_of[static_cast<size_t>(r)]);
      return out;
    };
    std::set<std::set<int32_t>> quads;
    for (const auto& m : groups(ranks, 2)) quads.insert(gpus_of(m));
    REQUIRE(quads == std::set<std::set<int32_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
    for (const auto& m : groups(ranks, 4)) {
      const std::set<int32_t> pair = gpus_of(m);
      const std::pair<int, int> key{*pair.begin(), *pair.rbegin()};
      INFO("pair GPU" << key.first << " - GPU" << key.second);
      REQUIRE(two.count(key) == 1);
      REQUIRE((key.first < 4) == (key.second < 4));  // tie between the two matchings broken by CPU package
    }
  }
  round_trip(t, "dgx1.xml");
}

TEST_CASE("PCIe server with NVLink bridges: K=2 gives the bridged pairs, not the PCIe-switch pair",
          "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("pcie-nvlink-bridge.xml"));
  REQUIRE(t.num_gpus() == 8);
  // Fixture sanity: PCIe alone would pair GPU1 with GPU2 (one switch) and GPU5 with GPU6.
  REQUIRE(t.locality(1, 2) == basp::plan::kLocalityPciSwitch);
  REQUIRE(t.locality(5, 6) == basp::plan::kLocalityPciSwitch);
  REQUIRE(t.bandwidth(1, 2) == 0);
  const auto ranks = world(t, 1, false);
  REQUIRE(as_set(groups(ranks, 4)) == GroupSet{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  REQUIRE(as_set(groups(ranks, 2)) == GroupSet{{0, 1, 2, 3}, {4, 5, 6, 7}});
  round_trip(t, "pcie.xml");
}

TEST_CASE("DGX A100: all pairs through NVSwitch, ties broken by PCI switches then CPU package", "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("dgx-a100.xml"));
  REQUIRE(t.num_gpus() == 8);
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) REQUIRE(t.bandwidth(a, b) == (a == b ? 0u : 300000u));
  }
  REQUIRE(t.gpus()[0].numa == 3);
  REQUIRE(t.gpus()[2].numa == 1);
  REQUIRE(t.locality(0, 1) == basp::plan::kLocalityPciSwitches);
  REQUIRE(t.locality(0, 2) == basp::plan::kLocalityPackage);
  REQUIRE(t.locality(0, 4) == basp::plan::kLocalitySystem);
  // Ranks take GPUs out of order, so that rank order alone would pick other groups.
  const std::vector<int32_t> gpu_of = {0, 4, 2, 6, 1, 5, 3, 7};
  const auto ranks = world(t, 1, false, gpu_of);
  auto by_gpu = [&](const std::vector<std::vector<int32_t>>& g) { return basp::test::gpu_sets(g, gpu_of); };
  REQUIRE(by_gpu(groups(ranks, 4)) == std::set<std::set<int32_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  REQUIRE(by_gpu(groups(ranks, 2)) == std::set<std::set<int32_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  REQUIRE(by_gpu(groups(ranks, 4, BASP_PLACEMENT_CONTIGUOUS)) ==
          std::set<std::set<int32_t>>{{0, 4}, {2, 6}, {1, 5}, {3, 7}});
  round_trip(t, "a100.xml");
}

TEST_CASE("HGX H100 recorded through NVSwitch PCI devices: every pair 18 links, groups by package",
          "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("hgx-h100.xml"));
  REQUIRE(t.num_gpus() == 8);
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) REQUIRE(t.bandwidth(a, b) == (a == b ? 0u : 18u * 25000u));
  }
  const auto ranks = world(t, 1, false);
  REQUIRE(as_set(groups(ranks, 2)) == GroupSet{{0, 1, 2, 3}, {4, 5, 6, 7}});
  for (const auto& m : groups(ranks, 4)) REQUIRE((m[0] < 4) == (m[1] < 4));
  round_trip(t, "h100.xml");
}

TEST_CASE("2 nodes x 8 GPUs numbered round-robin: K=8 groups are the nodes", "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("hgx-h100.xml"));
  const auto ranks = world(t, 2, /*cyclic=*/true);
  REQUIRE(as_set(groups(ranks, 2)) == GroupSet{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}});
  // K=4: inside one node and one CPU package (node-local ranks 0-3 sit on GPUs 0-3).
  for (const auto& m : groups(ranks, 4)) {
    REQUIRE(basp::test::nodes_of(ranks, m).size() == 1);
    for (int32_t r : m) REQUIRE((ranks[static_cast<size_t>(r)].gpu < 4) == (ranks[static_cast<size_t>(m[0])].gpu < 4));
  }
  // The paper's rule splits every group over both nodes here.
  for (const auto& m : groups(ranks, 2, BASP_PLACEMENT_CONTIGUOUS)) REQUIRE(basp::test::nodes_of(ranks, m).size() == 2);
}

TEST_CASE("GB200 NVL72-like: 18 trays of 4 in one NVLink domain, K=8 groups are two whole trays", "[topology][hwloc]") {
  const Topology t = Topology::load_xml(fixture("gb200-nvl72-tray.xml"));
  REQUIRE(t.num_gpus() == 4);
  const uint64_t domain = t.gpus()[0].domain_key;
  REQUIRE(domain != 0);
  for (const auto& g : t.gpus()) {
    REQUIRE(g.domain_key == domain);
    REQUIRE(g.domain_name == "5c4f3b1e-9a27-4d68-8b0f-2e7d6c5a4b39/32766");
  }
  for (bool cyclic : {false, true}) {
    const auto ranks = world(t, 18, cyclic);
    REQUIRE(ranks.size() == 72);
    const auto g = groups(ranks, 9);
    for (const auto& m : g) {
      std::map<uint64_t, int> per_node;
      for (int32_t r : m) per_node[ranks[static_cast<size_t>(r)].node_key]++;
      REQUIRE(per_node.size() == 2);
      for (const auto& [node, c] : per_node) REQUIRE(c == 4);
    }
  }
  round_trip(t, "gb200.xml");
}

TEST_CASE("recorded topologies survive export and import; bad files are rejected by name", "[topology][hwloc]") {
  // A file that does not exist, one that is not XML, one that is XML but not hwloc's, and an unwritable path.
  const std::string missing = temp_path("does-not-exist.xml");
  REQUIRE_THROWS_WITH(Topology::load_xml(missing), Catch::Contains(missing) && Catch::Contains("cannot be read"));
  const std::string garbage = temp_path("garbage.xml");
  std::ofstream(garbage) << "this is not a topology\n";
  REQUIRE_THROWS_WITH(Topology::load_xml(garbage),
                      Catch::Contains(garbage) && Catch::Contains("not a valid hwloc XML topology"));
  std::ofstream(garbage) << "<?xml version=\"1.0\"?>\n<html><body/></html>\n";
  REQUIRE_THROWS_WITH(Topology::load_xml(garbage), Catch::Contains("not a valid hwloc XML topology"));
  std::remove(garbage.c_str());
  try {
    Topology::load_xml(missing);
    FAIL("no exception");
  } catch (const basp::detail::Error& e) {
    REQUIRE(e.status() == BASP_ERROR_INVALID_ARGUMENT);
  }
  const Topology t = Topology::load_xml(fixture("pcie-nvlink-bridge.xml"));
  REQUIRE_THROWS_WITH(t.export_xml("/nonexistent-dir/x.xml"), Catch::Contains("/nonexistent-dir/x.xml"));
  REQUIRE_THROWS_WITH(basp::topology::make_rank_locality(t, 8), Catch::Contains("gpu (8)"));
}

TEST_CASE("live machine: no driver means no NVLink information, never a failure", "[topology][hwloc]") {
  const Topology t = Topology::discover();
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    REQUIRE_FALSE(t.has_nvlink_info());
    REQUIRE_THAT(t.link_status(), Catch::StartsWith("no NVLink information") && Catch::Contains("libnvidia-ml.so.1"));
  } else {
    dlclose(nvml);
    WARN("libnvidia-ml.so.1 is present: the no-driver path is not exercised here (" << t.link_status() << ")");
  }
  // Ranks without GPUs on one real node, dealt over 2 pretended nodes: placed by node.
  std::vector<basp::topology::RankLocality> ranks;
  for (int32_t r = 0; r < 8; ++r) ranks.push_back(basp::test::on_node(t, -1, "pretend" + std::to_string(r % 2)));
  REQUIRE(as_set(groups(ranks, 2)) == GroupSet{{0, 2, 4, 6}, {1, 3, 5, 7}});
  round_trip(t, "live.xml");
  const std::string path = temp_path("live-status.xml");
  t.export_xml(path);
  const Topology back = Topology::load_xml(path);
  std::remove(path.c_str());
  REQUIRE(back.link_status().find(t.has_nvlink_info() ? "recorded" : "no NVLink information") != std::string::npos);
}

TEST_CASE("gathered records from another libbasp version are rejected", "[topology]") {
  std::vector<basp::topology::RankLocality> ranks(2);
  ranks[1].magic = 0x12345678;
  REQUIRE_THROWS_WITH(basp::topology::placement_input(ranks), Catch::Contains("rank 1"));
  ranks[1].magic = basp::topology::kRankLocalityMagic;
  ranks[1].gpu = 3;
  REQUIRE_THROWS_WITH(basp::topology::placement_input(ranks), Catch::Contains("rank 1 reports GPU 3 of 0"));
}
