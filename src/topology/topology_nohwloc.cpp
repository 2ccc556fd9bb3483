// Topology in a build without hwloc: GPUs and NVLinks from NVML alone, no PCI/NUMA locality, no XML.
#include "common/error.h"
#include "topology/nvml_probe.h"
#include "topology/topology.h"

namespace basp::topology {

Topology Topology::discover() {
  Topology t;
  t.node_ = local_node_identity();
  t.origin_ = "this machine (built without hwloc: no PCI/NUMA locality)";
  t.set_from_nvml(probe_nvml(), "");
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
