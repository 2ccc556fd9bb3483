#include "topology/nvlink_matrix.h"

#include <algorithm>
#include <limits>

namespace basp::topology {

std::vector<uint32_t> nvlink_bandwidth_matrix(const NvmlReport& report, const std::vector<PciAddress>& gpus) {
  const size_t n = gpus.size();
  std::vector<uint64_t> sum(n * n, 0);
  std::vector<uint64_t> to_switch(n, 0);
  auto index_of = [&gpus](const PciAddress& a) {
    auto it = std::find(gpus.begin(), gpus.end(), a);
    return it == gpus.end() ? -1 : static_cast<int>(it - gpus.begin());
  };
  auto nvml_gpu = [&report](const PciAddress& a) {
    return std::any_of(report.gpus.begin(), report.gpus.end(), [&a](const NvmlGpu& g) { return g.pci == a; });
  };
  for (const NvmlGpu& g : report.gpus) {
    const int a = index_of(g.pci);
    if (a < 0) continue;
    for (const NvmlLink& l : g.links) {
      const int b = index_of(l.remote);
      if (b >= 0 && b != a) {
        sum[static_cast<size_t>(a) * n + static_cast<size_t>(b)] += g.link_bandwidth;
      } else if (b < 0 && !nvml_gpu(l.remote) && l.remote_vendor == kPciVendorNvidia) {
        to_switch[static_cast<size_t>(a)] += g.link_bandwidth;
      }
    }
  }
  std::vector<uint32_t> out(n * n, 0);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      uint64_t v = sum[a * n + b];
      if (to_switch[a] > 0 && to_switch[b] > 0) v += std::min(to_switch[a], to_switch[b]);
      out[a * n + b] = static_cast<uint32_t>(std::min<uint64_t>(v, std::numeric_limits<uint32_t>::max()));
    }
  }
  return out;
}

}  // namespace basp::topology
