// What NVML says about this machine's GPUs and their NVLinks, as plain data (no NVML or hwloc types), so that
// the arithmetic on it (nvlink_matrix.h) is testable without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "topology/pci_address.h"

namespace basp::topology {

constexpr uint32_t kPciVendorNvidia = 0x10de;

struct NvmlLink {
  PciAddress remote;  // the GPU, NVSwitch or CPU at the other end
  uint32_t remote_vendor = 0;
};

struct NvmlGpu {
  PciAddress pci;
  std::string model;
  int32_t cc_major = 0;
  int32_t cc_minor = 0;
  uint32_t link_bandwidth = 0;  // MB/s one way per link (by architecture, see link_bandwidth_for)
  std::vector<NvmlLink> links;  // active links only
  bool fabric_registered = false;
  std::array<uint8_t, 16> cluster_uuid{};
  uint32_t clique_id = 0;
};

struct NvmlReport {
  bool available = false;  // false: no driver, no library, or NVML failed; `status` says which
  std::string status;
  std::vector<NvmlGpu> gpus;
};

// Opens libnvidia-ml.so.1 (once per process), reads every GPU's links and fabric registration and shuts NVML
// down again. Never throws: every failure becomes available == false with the reason in `status`.
NvmlReport probe_nvml();

// NVLinks to iterate for a compute capability: the per-architecture maximum (NVML's own maximum over-reports).
int32_t nvlink_count_for(int32_t cc_major, int32_t cc_minor);

// One way MB/s of one link for a compute capability (NVLink 1: 20000, 2-4: 25000, GA10x bridges: 14062,
// NVLink 5: 50000). Placement only compares GPUs of one node, so the table needs to order, not to be exact.
uint32_t link_bandwidth_for(int32_t cc_major, int32_t cc_minor);

// "c0ffee00-0000-0000-0000-000000000001"
std::string uuid_string(const std::array<uint8_t, 16>& uuid);

}  // namespace basp::topology
