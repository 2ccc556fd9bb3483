// One node's topology: its GPUs, the NVLink bandwidth between them, their PCI/NUMA locality and the multi-node
// NVLink domain each belongs to.
//
// Behind it is one hwloc topology carrying everything as hwloc data, so that a live machine and a recorded one go
// through the same reading code:
//   - an "NVLinkBandwidth" distance matrix (hwloc's own name and unit: one way MB/s summed over links, 0 = none)
//     between the GPUs' PCI devices, built from NVML by discover(); recorded files from hwloc's own NVML backend
//     (matrices between "nvmlN" OS devices, possibly through NVSwitch PCI devices) are read as well;
//   - info attributes: on the root "BaspNodeName", "BaspNodeKey", "BaspNodeIdSource" and "BaspNVLinkInfo"
//     ("nvml", or "none: <reason>"); on each GPU "GPUModel", "BaspNVLinkFabricCluster" and
//     "BaspNVLinkFabricClique" (the NVML fabric registration that defines a multi-node NVLink domain).
// export_xml writes it as hwloc XML; load_xml reads such a file (or any hwloc XML) back.
//
// GPU order: hwloc's nvmlN index when the file has such OS devices, else PCI address order, which is NVML's
// order and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topology/node_identity.h"

namespace basp::topology {

enum class LinkSource : uint8_t {
  kNone = 0,      // no NVLink information (no driver, no NVML, or a file without a matrix)
  kNvml = 1,      // read from NVML on this machine
  kRecorded = 2,  // read from a file
};

struct GpuInfo {
  std::string pci_bus_id;     // "0000:07:00.0"
  std::string model;          // "" when unknown
  std::string cpu_affinity;   // hwloc list syntax ("0-15,32-47"); "" when unknown
  std::string numa_affinity;  // NUMA nodes near the GPU, list syntax; "" when unknown
  int32_t numa = -1;          // the NUMA node when exactly one is near, else -1
  int32_t package = -1;       // CPU package os index, -1 when unknown
  uint64_t domain_key = 0;    // multi-node NVLink domain; 0 = none (the node is the domain)
  std::string domain_name;    // "<cluster uuid>/<clique id>", "" when none
};

struct HwlocHandle;  // the hwloc topology (topology_hwloc.cpp)
struct NvmlReport;

class Topology {
 public:
  // This machine: hwloc (packages, NUMA, PCI) and NVML (NVLink, fabric). Without a driver or NVML the topology
  // has no NVLink information and says why; that is not an error. Throws only when hwloc itself fails.
  static Topology discover();
  // A hwloc XML file. Throws BASP_ERROR_INVALID_ARGUMENT naming the file when it cannot be read or is not a hwloc
  // topology; BASP_ERROR_UNSUPPORTED in a build without hwloc.
  static Topology load_xml(const std::string& path);
  // Throws BASP_ERROR_INVALID_ARGUMENT naming the file when it cannot be written.
  void export_xml(const std::string& path) const;

  const NodeIdentity& node() const { return node_; }
  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  int32_t num_gpus() const { return static_cast<int32_t>(gpus_.size()); }
  uint32_t bandwidth(int32_t a, int32_t b) const;  // MB/s one way; 0 for a == b or out of range
  uint8_t locality(int32_t a, int32_t b) const;    // plan::PciLocality
  LinkSource link_source() const { return link_source_; }
  bool has_nvlink_info() const { return link_source_ != LinkSource::kNone; }
  // "NVLink information from NVML", "... recorded in FILE", or "no NVLink information (<reason>)".
  const std::string& link_status() const { return link_status_; }
  // "this machine (hwloc 2.9.0)" or the file path.
  const std::string& origin() const { return origin_; }
  // The local index of the GPU at `pci_bus_id` (compared numerically), -1 when absent or malformed.
  int32_t find_gpu(const std::string& pci_bus_id) const;

 private:
  friend struct TopologyReader;
  // GPUs and NVLinks from NVML alone (no PCI/NUMA locality): builds without hwloc, and machines where hwloc sees
  // none of NVML's GPUs (containers hiding the PCI tree).
  void set_from_nvml(const NvmlReport& report, const std::string& note);
  NodeIdentity node_;
  std::vector<GpuInfo> gpus_;
  std::vector<uint32_t> bandwidth_;  // [a * n + b]
  std::vector<uint8_t> locality_;    // [a * n + b]
  LinkSource link_source_ = LinkSource::kNone;
  std::string link_status_;
  std::string origin_;
  std::shared_ptr<HwlocHandle> hwloc_;
};

// The topology of this machine, discovered once per process (the first call pays for hwloc and NVML; the
// node identity, including BASP_NODE_ID, is the one read at that call).
const Topology& local_topology();

}  // namespace basp::topology
