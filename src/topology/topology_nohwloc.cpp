// Topology in a build without hwloc: GPUs and NVLinks from NVML alone, no PCI/NUMA locality, no XML.
#include <algorithm>

#include "common/error.h"
#include "plan/placement.h"
#include "topology/nvlink_matrix.h"
#include "topology/nvml_probe.h"
#include "topology/topology.h"

namespace basp::topology {

struct TopologyReader {
  static void fill(Topology& t, const NvmlReport& report) {
    std::vector<PciAddress> addresses;
    for (const NvmlGpu& g : report.gpus) addresses.push_back(g.pci);
    std::sort(addresses.begin(), addresses.end());
    const size_t n = addresses.size();
    for (const PciAddress& a : addresses) {
      GpuInfo info;
      info.pci_bus_id = a.str();
      for (const NvmlGpu& g : report.gpus) {
        if (!(g.pci == a)) continue;
        info.model = g.model;
        if (g.fabric_registered) {
          info.domain_name = uuid_string(g.cluster_uuid) + "/" + std::to_string(g.clique_id);
          info.domain_key = fnv1a64(info.domain_name);
        }
      }
      t.gpus_.push_back(std::move(info));
    }
    t.bandwidth_ = nvlink_bandwidth_matrix(report, addresses);
    t.locality_.assign(n * n, plan::kLocalitySystem);
    t.link_source_ = report.available ? LinkSource::kNvml : LinkSource::kNone;
    t.link_status_ = report.available ? "NVLink information from NVML"
                                      : "no NVLink information (" + report.status + ")";
  }
};

Topology Topology::discover() {
  Topology t;
  t.node_ = local_node_identity();
  t.origin_ = "this machine (built without hwloc: no PCI/NUMA locality)";
  TopologyReader::fill(t, probe_nvml());
  return t;
}

Topology Topology::load_xml(const std::string& path) {
  detail::fail(BASP_ERROR_UNSUPPORTED, "cannot read topology file \"", path,
               "\": this libbasp was built without hwloc (BASP_ENABLE_HWLOC)");
}

void Topology::export_xml(const std::string& path) const {
  detail::fail(BASP_ERROR_UNSUPPORTED, "cannot write topology file \"", path,
               "\": this libbasp was built without hwloc (BASP_ENABLE_HWLOC)");
}

}  // namespace basp::topology
