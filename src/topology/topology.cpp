#include "topology/topology.h"

#include <mutex>

#include "plan/placement.h"
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

const Topology& local_topology() {
  static std::once_flag once;
  static std::unique_ptr<Topology> topo;
  std::call_once(once, [] { topo = std::make_unique<Topology>(Topology::discover()); });
  return *topo;
}

}  // namespace basp::topology
