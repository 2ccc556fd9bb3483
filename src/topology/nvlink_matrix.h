// NVML's per-link view -> hwloc's "NVLinkBandwidth" matrix (one way MB/s summed over links, 0 = no link).
// Pure arithmetic on an NvmlReport, so it is tested with fabricated reports.
#pragma once

#include <cstdint>
#include <vector>

#include "topology/nvml_probe.h"
#include "topology/pci_address.h"

namespace basp::topology {

// [a * n + b] for the n GPUs `gpus` (the topology's order). A link whose far end is one of these GPUs adds one
// link's bandwidth to that pair. Links to NVIDIA devices that are not GPUs are NVSwitch ports: two GPUs that both
// reach switches are connected through the fabric at the smaller of their two switch bandwidths. Links to other
// devices (CPUs: IBM NPUs) do not connect GPUs. GPUs of `gpus` that NVML does not list have no links.
std::vector<uint32_t> nvlink_bandwidth_matrix(const NvmlReport& report, const std::vector<PciAddress>& gpus);

}  // namespace basp::topology
