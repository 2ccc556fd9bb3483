#include "tools/topo_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <unordered_map>

#include "plan/placement.h"

namespace basp::tools {

namespace {

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

std::string join_ints(const std::vector<int32_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + std::to_string(v[i]);
  return out;
}

}  // namespace

std::string matrix_cell(uint32_t bandwidth, uint8_t locality) {
  if (bandwidth > 0) return "NV" + std::to_string((bandwidth + 500) / 1000) + "G";
  switch (locality) {
    case plan::kLocalityPciSwitch: return "PIX";
    case plan::kLocalityPciSwitches: return "PXB";
    case plan::kLocalityHostBridge: return "PHB";
    case plan::kLocalityNumaNode: return "NODE";
    default: return "SYS";
  }
}

std::string topology_report(const topology::Topology& topo) {
  std::ostringstream out;
  out << "Topology: " << topo.origin() << "\n";
  out << "Node: \"" << topo.node().name << "\" (key " << topology::key_to_hex(topo.node().key) << ", from "
      << topo.node().source << ")\n";
  out << "NVLink: " << topo.link_status() << "\n";
  const int32_t n = topo.num_gpus();
  out << "GPUs: " << n << "\n";
  if (n == 0) {
    out << "\nNo NVIDIA GPU in this topology.\n";
    return out.str();
  }
  constexpr size_t kCell = 8;
  out << "\n" << pad("", kCell);
  for (int32_t b = 0; b < n; ++b) out << pad("GPU" + std::to_string(b), kCell);
  out << pad("CPU Affinity", 20) << pad("NUMA Affinity", 15) << "NVLink Domain\n";
  for (int32_t a = 0; a < n; ++a) {
    const topology::GpuInfo& g = topo.gpus()[static_cast<size_t>(a)];
    out << pad("GPU" + std::to_string(a), kCell);
    for (int32_t b = 0; b < n; ++b) {
      out << pad(a == b ? " X" : matrix_cell(topo.bandwidth(a, b), topo.locality(a, b)), kCell);
    }
    out << pad(g.cpu_affinity.empty() ? "N/A" : g.cpu_affinity, 20)
        << pad(g.numa_affinity.empty() ? "N/A" : g.numa_affinity, 15) << (g.domain_name.empty() ? "-" : g.domain_name)
        << "\n";
  }
  out << "\n";
  for (int32_t a = 0; a < n; ++a) {
    const topology::GpuInfo& g = topo.gpus()[static_cast<size_t>(a)];
    out << "GPU" << a << ": " << g.pci_bus_id << (g.model.empty() ? "" : "  " + g.model) << "\n";
  }
  return out.str();
}

std::string matrix_legend() {
  return "Legend:\n"
         "  X     = self\n"
         "  NV#G  = NVLink, # GB/s one way summed over the links (hwloc's NVLinkBandwidth / 1000)\n"
         "  SYS   = PCIe and the SMP interconnect between NUMA nodes\n"
         "  NODE  = PCIe and the interconnect between PCIe host bridges within a NUMA node\n"
         "  PHB   = PCIe through a PCIe host bridge\n"
         "  PXB   = PCIe through several PCIe switches, no host bridge\n"
         "  PIX   = PCIe through at most one PCIe switch\n";
}

std::string ranks_report(const std::vector<topology::RankLocality>& ranks) {
  struct Node {
    std::string name;
    uint64_t key;
    std::vector<int32_t> ranks;
    std::vector<int32_t> gpus;
  };
  std::vector<Node> nodes;
  std::unordered_map<uint64_t, size_t> node_index;
  std::map<uint64_t, std::vector<size_t>> domains;  // key -> nodes (sorted key order is fine for a report)
  std::vector<uint64_t> domain_order;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& rec = ranks[r];
    auto it = node_index.emplace(rec.node_key, nodes.size());
    if (it.second) nodes.push_back(Node{topology::node_name_of(rec), rec.node_key, {}, {}});
    Node& node = nodes[it.first->second];
    node.ranks.push_back(static_cast<int32_t>(r));
    node.gpus.push_back(rec.gpu);
    if (rec.gpu >= 0 && rec.domain_key != 0) {
      auto& members = domains[rec.domain_key];
      if (members.empty()) domain_order.push_back(rec.domain_key);
      if (std::find(members.begin(), members.end(), it.first->second) == members.end()) {
        members.push_back(it.first->second);
      }
    }
  }
  std::ostringstream out;
  out << "Ranks: " << ranks.size() << " on " << nodes.size() << " node(s)\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    std::string gpus;
    for (size_t j = 0; j < n.gpus.size(); ++j)
      gpus += (j ? " " : "") + (n.gpus[j] < 0 ? std::string("-") : std::to_string(n.gpus[j]));
    out << "  node " << i << " \"" << n.name << "\" (key " << topology::key_to_hex(n.key) << "): ranks "
        << join_ints(n.ranks) << " on GPUs " << gpus << "\n";
  }
  if (domain_order.empty()) {
    out << "NVLink domains: none spans nodes (each node is its own domain)\n";
  } else {
    out << "NVLink domains spanning nodes: " << domain_order.size() << "\n";
    for (size_t d = 0; d < domain_order.size(); ++d) {
      const auto& members = domains[domain_order[d]];
      std::vector<int32_t> ids;
      for (size_t m : members) ids.push_back(static_cast<int32_t>(m));
      out << "  domain " << d << " (key " << topology::key_to_hex(domain_order[d]) << "): nodes " << join_ints(ids)
          << "\n";
    }
  }
  return out.str();
}

std::string groups_report(const plan::GroupLayout& layout, const std::vector<topology::RankLocality>& ranks,
                          const std::string& placement) {
  std::ostringstream out;
  out << "Groups: N=" << layout.world_size << " B=" << layout.micro_batch << " G=" << layout.num_groups
      << " K=" << layout.group_size << " placement=" << placement << "\n";
  for (int32_t g = 0; g < layout.num_groups; ++g) {
    const auto& members = layout.members[static_cast<size_t>(g)];
    std::vector<std::string> node_names;
    uint32_t weakest = UINT32_MAX;
    bool same_node_pair = false;
    for (size_t i = 0; i < members.size(); ++i) {
      const auto& a = ranks[static_cast<size_t>(members[i])];
      const std::string name = topology::node_name_of(a);
      if (std::find(node_names.begin(), node_names.end(), name) == node_names.end()) node_names.push_back(name);
      for (size_t j = 0; j < members.size(); ++j) {
        const auto& b = ranks[static_cast<size_t>(members[j])];
        if (i == j || a.node_key != b.node_key) continue;
        same_node_pair = true;
        const uint32_t bw = (a.gpu >= 0 && b.gpu >= 0 && a.gpu != b.gpu) ? a.bandwidth[b.gpu] : 0;
        weakest = std::min(weakest, bw);
      }
    }
    std::string nodes;
    for (size_t i = 0; i < node_names.size(); ++i) nodes += (i ? "," : "") + node_names[i];
    out << "  group " << g << ": ranks " << join_ints(members) << " | " << node_names.size() << " node(s): " << nodes;
    if (same_node_pair) {
      out << " | weakest NVLink inside a node: "
          << (weakest == 0 ? std::string("none") : std::to_string((weakest + 500) / 1000) + " GB/s");
    }
    out << "\n";
  }
  return out.str();
}

std::string cost_model_report(const plan::CostModel& m, int32_t max_k) {
  std::ostringstream out;
  out << "Cost model (" << m.source;
  if (m.world_size > 0) out << ", " << m.world_size << " ranks on " << m.num_nodes << " node(s)";
  out << ")";
  if (!m.note.empty()) out << ": " << m.note;
  out << "\n";
  char line[256];
  auto rate = [](double beta) { return beta > 0 ? 1e-9 / beta : 0.0; };
  std::snprintf(line, sizeof line, "  alpha(K) = %.3g s + %.3g s * (K - 1)\n", m.a0, m.a1);
  out << line;
  std::snprintf(line, sizeof line, "  beta  node %.3g s/B (%.2f GB/s)   network %.3g s/B (%.2f GB/s)\n", m.beta_node,
                rate(m.beta_node), m.beta_network, rate(m.beta_network));
  out << line;
  std::snprintf(line, sizeof line, "  attention %.3g s * sum(L^2) + %.3g s * sum(L)\n", m.c2, m.c1);
  out << line;
  std::snprintf(line, sizeof line, "  head chunks: %.3g s per extra row piece (C chunks: pieces * (C - 1))\n",
                m.per_piece);
  out << line;
  out << "  one exchange, predicted (us):\n";
  std::snprintf(line, sizeof line, "  %5s  %11s %11s %11s   %11s %11s %11s\n", "K", "node 64K", "node 1M", "node 16M",
                "net 64K", "net 1M", "net 16M");
  out << line;
  for (int32_t k = 2; k <= std::max(max_k, 2); k *= 2) {
    double t[6];
    const double sizes[3] = {65536.0, 1048576.0, 16777216.0};
    for (int i = 0; i < 3; ++i) {
      t[i] = m.exchange_seconds(k, sizes[i], 0.0) * 1e6;
      t[3 + i] = m.exchange_seconds(k, 0.0, sizes[i]) * 1e6;
    }
    std::snprintf(line, sizeof line, "  %5d  %11.1f %11.1f %11.1f   %11.1f %11.1f %11.1f\n", k, t[0], t[1], t[2], t[3],
                  t[4], t[5]);
    out << line;
  }
  return out.str();
}

}  // namespace basp::tools
