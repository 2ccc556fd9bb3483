#include "topology/topology.h"

#include <algorithm>
#include <mutex>

#include "plan/placement.h"
#include "topology/nvlink_matrix.h"
#include "topology/nvml_probe.h"
#include "topology/pci_address.h"

namespace basp::topology {

uint32_t Topology::bandwidth(int32_t a, int32_t b) const {
  const int32_t n = num_gpus();
  if (a < 0 || b < 0 || a >= n || b >= n || a == b) return 0;
  return bandwidth_[static_cast<size_t>(a) * static_cast<size_t>(n) + static_cast<size_t>(b)];
}

uint8_t Topology::locality(int32_t a, int32_t b) const {
  const int32_t n = num_gpus();
  if (a < 0 || b < 0 || a >= n || b >= n || a == b) return plan::kLocalitySystem;
  return locality_[static_cast<size_t>(a) * static_cast<size_t>(n) + static_cast<size_t>(b)];
}

int32_t Topology::find_gpu(const std::string& pci_bus_id) const {
  PciAddress want;
  if (!PciAddress::parse(pci_bus_id, &want)) return -1;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    PciAddress have;
    if (PciAddress::parse(gpus_[i].pci_bus_id, &have) && have == want) return static_cast<int32_t>(i);
  }
  return -1;
}

void Topology::set_from_nvml(const NvmlReport& report, const std::string& note) {
  std::vector<PciAddress> addresses;
  for (const NvmlGpu& g : report.gpus) addresses.push_back(g.pci);
  std::sort(addresses.begin(), addresses.end());
  const size_t n = addresses.size();
  gpus_.clear();
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
    gpus_.push_back(std::move(info));
  }
  bandwidth_ = nvlink_bandwidth_matrix(report, addresses);
  locality_.assign(n * n, plan::kLocalitySystem);
  link_source_ = report.available ? LinkSource::kNvml : LinkSource::kNone;
  link_status_ =
      report.available ? "NVLink information from NVML" + note : "no NVLink information (" + report.status + ")";
}

const Topology& local_topology() {
  static std::once_flag once;
  static std::unique_ptr<Topology> topo;
  std::call_once(once, [] { topo = std::make_unique<Topology>(Topology::discover()); });
  return *topo;
}

}  // namespace basp::topology
