#include "topology/pci_address.h"

#include <cstdio>
#include <string>

namespace basp::topology {

std::string PciAddress::str() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buf;
}

namespace {

// Hex digits only (no sign, no "0x", no spaces), at most `max_digits` of them.
bool hex_field(const std::string& text, size_t begin, size_t end, size_t max_digits, uint32_t* out) {
  if (end <= begin || end - begin > max_digits) return false;
  uint32_t v = 0;
  for (size_t i = begin; i < end; ++i) {
    const char c = text[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

bool PciAddress::parse(const std::string& text, PciAddress* out) {
  const size_t dot = text.rfind('.');
  const size_t last_colon = text.rfind(':');
  if (dot == std::string::npos || last_colon == std::string::npos || last_colon > dot) return false;
  const size_t first_colon = text.find(':');
  PciAddress a;
  if (first_colon != last_colon) {
    if (text.find(':', first_colon + 1) != last_colon) return false;
    if (!hex_field(text, 0, first_colon, 8, &a.domain)) return false;
  }
  const size_t bus_begin = first_colon != last_colon ? first_colon + 1 : 0;
  if (!hex_field(text, bus_begin, last_colon, 2, &a.bus) || !hex_field(text, last_colon + 1, dot, 2, &a.device) ||
      !hex_field(text, dot + 1, text.size(), 1, &a.function)) {
    return false;
  }
  if (a.device > 0x1f || a.function > 7) return false;
  *out = a;
  return true;
}

}  // namespace basp::topology
