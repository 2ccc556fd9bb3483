// A PCI address (domain:bus:device.function), the key that joins NVML's GPUs, hwloc's PCI objects and CUDA's
// cudaDeviceGetPCIBusId strings. Compared numerically: the tools disagree on case and on domain width.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

namespace basp::topology {

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;

  bool operator==(const PciAddress& o) const {
    return std::tie(domain, bus, device, function) == std::tie(o.domain, o.bus, o.device, o.function);
  }
  bool operator<(const PciAddress& o) const {
    return std::tie(domain, bus, device, function) < std::tie(o.domain, o.bus, o.device, o.function);
  }
  // "0000:07:00.0"
  std::string str() const;
  // Accepts "dddd:bb:dd.f", "dddddddd:bb:dd.f" and "bb:dd.f" (domain 0), any case. False on anything else.
  static bool parse(const std::string& text, PciAddress* out);
};

}  // namespace basp::topology
