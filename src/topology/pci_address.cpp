#include "topology/pci_address.h"

#include <cstdio>

namespace basp::topology {

std::string PciAddress::str() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buf;
}

bool PciAddress::parse(const std::string& text, PciAddress* out) {
  unsigned d = 0, b = 0, dev = 0, f = 0;
  int used = 0;
  PciAddress a;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%n", &d, &b, &dev, &f, &used) == 4 &&
      used == static_cast<int>(text.size())) {
    a = PciAddress{d, b, dev, f};
  } else if (std::sscanf(text.c_str(), "%x:%x.%x%n", &b, &dev, &f, &used) == 3 &&
             used == static_cast<int>(text.size())) {
    a = PciAddress{0, b, dev, f};
  } else {
    return false;
  }
  if (a.bus > 0xff || a.device > 0x1f || a.function > 7) return false;
  *out = a;
  return true;
}

}  // namespace basp::topology
