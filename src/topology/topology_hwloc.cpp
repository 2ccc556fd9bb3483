// Topology on hwloc: discovery annotates a live hwloc topology with NVML's facts, then live and recorded
// topologies are read by the same code (TopologyReader::read).
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "plan/placement.h"
#include "topology/nvlink_matrix.h"
#include "topology/nvml_probe.h"
#include "topology/topology.h"
#include "topology/xml_sandbox.h"

namespace basp::topology {

struct HwlocHandle {
  hwloc_topology_t topo = nullptr;
  HwlocHandle() = default;
  HwlocHandle(const HwlocHandle&) = delete;
  HwlocHandle& operator=(const HwlocHandle&) = delete;
  ~HwlocHandle() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

namespace {

constexpr const char* kMatrixName = "NVLinkBandwidth";
constexpr const char* kInfoNodeName = "BaspNodeName";
constexpr const char* kInfoNodeKey = "BaspNodeKey";
constexpr const char* kInfoNodeSource = "BaspNodeIdSource";
constexpr const char* kInfoNVLink = "BaspNVLinkInfo";
constexpr const char* kInfoFabricCluster = "BaspNVLinkFabricCluster";
constexpr const char* kInfoFabricClique = "BaspNVLinkFabricClique";
constexpr const char* kInfoModel = "GPUModel";

struct GpuObject {
  hwloc_obj_t pci = nullptr;    // the GPU's PCI device
  hwloc_obj_t osdev = nullptr;  // hwloc's "nvmlN" OS device in recorded files, else null
  int index = 0;                // N of nvmlN
};

std::string hwloc_version_string() {
#ifdef HWLOC_VERSION
  return HWLOC_VERSION;  // the release compiled against
#else
  const unsigned v = hwloc_get_api_version();
  return "API " + std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff);
#endif
}

PciAddress address_of(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return PciAddress{a.domain, a.bus, a.dev, a.func};
}

// "nvml12" -> 12; -1 for any other name.
int nvml_index(const char* name) {
  if (name == nullptr || std::strncmp(name, "nvml", 4) != 0 || name[4] == '\0') return -1;
  int v = 0;
  for (const char* p = name + 4; *p; ++p) {
    if (*p < '0' || *p > '9' || v > 1000000) return -1;
    v = v * 10 + (*p - '0');
  }
  return v;
}

bool is_nvidia_gpu(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return a.vendor_id == kPciVendorNvidia && (a.class_id == 0x0300 || a.class_id == 0x0302);
}

// hwloc's NVML backend names its GPUs nvmlN (typed GPU or, in older files, COPROC: match by name). Without them the
// GPUs are the NVIDIA display/3D-controller PCI devices in address order.
std::vector<GpuObject> find_gpus(hwloc_topology_t topo) {
  std::vector<GpuObject> gpus;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    const int idx = nvml_index(o->name);
    if (idx < 0) continue;
    hwloc_obj_t p = o->parent;
    while (p && p->type != HWLOC_OBJ_PCI_DEVICE) p = p->parent;
    if (p == nullptr) continue;
    gpus.push_back(GpuObject{p, o, idx});
  }
  if (!gpus.empty()) {
    std::sort(gpus.begin(), gpus.end(), [](const GpuObject& a, const GpuObject& b) { return a.index < b.index; });
    return gpus;
  }
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo, nullptr); p; p = hwloc_get_next_pcidev(topo, p)) {
    if (is_nvidia_gpu(p)) gpus.push_back(GpuObject{p, nullptr, 0});
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuObject& a, const GpuObject& b) { return address_of(a.pci) < address_of(b.pci); });
  for (size_t i = 0; i < gpus.size(); ++i) gpus[i].index = static_cast<int>(i);
  return gpus;
}

const char* info_of(const GpuObject& g, const char* name) {
  const char* v = g.osdev ? hwloc_obj_get_info_by_name(g.osdev, name) : nullptr;
  return v ? v : hwloc_obj_get_info_by_name(g.pci, name);
}

std::string list_string(hwloc_const_bitmap_t set) {
  if (set == nullptr || hwloc_bitmap_iszero(set)) return "";
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || s == nullptr) return "";
  std::string out(s);
  std::free(s);
  return out;
}

int32_t package_of(hwloc_topology_t topo, hwloc_obj_t cpu_side) {
  for (hwloc_obj_t o = cpu_side; o; o = o->parent) {
    if (o->type == HWLOC_OBJ_PACKAGE) return static_cast<int32_t>(o->os_index);
  }
  // Attached above the packages: only a single-package machine still has an answer.
  if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE) == 1) {
    return static_cast<int32_t>(hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0)->os_index);
  }
  return -1;
}

// The integer in an enum field of an hwloc object. hwloc's XML import stores whatever number the file holds
// (fuzz_topo_import found a bridge upstream_type of 2, which hwloc_obj_bridge_type_t has no name for), and
// loading an enum outside its values is undefined behaviour: read the bytes as the underlying integer instead.
template <typename E>
std::underlying_type_t<E> enum_value(const E& e) {
  std::underlying_type_t<E> v{};
  static_assert(sizeof(v) == sizeof(E), "an enum is stored as its underlying type");
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

// hwloc_get_common_ancestor_obj does not handle I/O objects: walk the parents.
hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent) {
    for (hwloc_obj_t y = b; y; y = y->parent) {
      if (x == y) return x;
    }
  }
  return nullptr;
}

uint8_t pci_locality(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b, const GpuInfo& ga, const GpuInfo& gb) {
  hwloc_obj_t common = common_ancestor(a, b);
  if (common != nullptr && common->type == HWLOC_OBJ_PCI_DEVICE) return plan::kLocalityPciSwitch;
  if (common != nullptr && common->type == HWLOC_OBJ_BRIDGE) {
    if (enum_value(common->attr->bridge.upstream_type) == HWLOC_OBJ_BRIDGE_HOST) return plan::kLocalityHostBridge;
    // One switch: device -> downstream port -> upstream port (the common bridge) on both sides.
    auto near = [common](hwloc_obj_t x) { return x->parent == common || (x->parent && x->parent->parent == common); };
    return near(a) && near(b) ? plan::kLocalityPciSwitch : plan::kLocalityPciSwitches;
  }
  hwloc_obj_t ca = hwloc_get_non_io_ancestor_obj(topo, a);
  hwloc_obj_t cb = hwloc_get_non_io_ancestor_obj(topo, b);
  if (ca && cb && ca->nodeset && cb->nodeset && hwloc_bitmap_intersects(ca->nodeset, cb->nodeset)) {
    return plan::kLocalityNumaNode;
  }
  if (ga.package >= 0 && ga.package == gb.package) return plan::kLocalityPackage;
  return plan::kLocalitySystem;
}

uint32_t clamp32(hwloc_uint64_t v) {
  return static_cast<uint32_t>(std::min<hwloc_uint64_t>(v, std::numeric_limits<uint32_t>::max()));
}

// Reads every NVLinkBandwidth matrix into [a * n + b]. A matrix may also hold non-GPU objects: CPU packages
// (POWER8's NVLinks to the CPU: ignored) and NVSwitch PCI devices (hwloc's DGX-2 style: GPU<->switch entries).
// Two GPUs that both reach switches are connected through the fabric at the smaller of their total switch
// bandwidths, the rule nvlink_matrix.h applies to NVML's links (and the result hwloc_distances_transform's
// MERGE_SWITCH_PORTS + TRANSITIVE_CLOSURE gives on the DGX-2 recording). Returns whether a matrix was found.
bool read_matrix(hwloc_topology_t topo, const std::vector<GpuObject>& gpus, std::vector<uint32_t>& bw) {
  const size_t n = gpus.size();
  bw.assign(n * n, 0);
  unsigned nr = 0;
  if (hwloc_distances_get_by_name(topo, kMatrixName, &nr, nullptr, 0) != 0 || nr == 0) return false;
  std::vector<hwloc_distances_s*> all(nr, nullptr);
  if (hwloc_distances_get_by_name(topo, kMatrixName, &nr, all.data(), 0) != 0) return false;
  auto gpu_of = [&gpus](hwloc_obj_t o) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i].pci == o || gpus[i].osdev == o) return static_cast<int>(i);
    }
    return -1;
  };
  std::vector<uint64_t> to_switch(n, 0);
  for (unsigned m = 0; m < nr; ++m) {
    const hwloc_distances_s* d = all[m];
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      const int a = gpu_of(d->objs[i]);
      if (a < 0) continue;
      for (unsigned j = 0; j < d->nbobjs; ++j) {
        const hwloc_uint64_t v = d->values[static_cast<size_t>(i) * d->nbobjs + j];
        const int b = gpu_of(d->objs[j]);
        if (b >= 0 && b != a) {
          uint32_t& cell = bw[static_cast<size_t>(a) * n + static_cast<size_t>(b)];
          cell = std::max(cell, clamp32(v));
        } else if (b < 0 && d->objs[j]->type == HWLOC_OBJ_PCI_DEVICE) {
          to_switch[static_cast<size_t>(a)] += v;
        }
      }
    }
    hwloc_distances_release(topo, all[m]);
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b || to_switch[a] == 0 || to_switch[b] == 0) continue;
      uint32_t& cell = bw[a * n + b];
      cell = std::max(cell, clamp32(std::min(to_switch[a], to_switch[b])));
    }
  }
  return true;
}

NodeIdentity identity_from(hwloc_topology_t topo, const std::string& file) {
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  NodeIdentity id;
  const char* name = hwloc_obj_get_info_by_name(root, kInfoNodeName);
  const char* key = hwloc_obj_get_info_by_name(root, kInfoNodeKey);
  const char* source = hwloc_obj_get_info_by_name(root, kInfoNodeSource);
  if (name != nullptr && key != nullptr) {
    id.name = name;
    id.key = key_from_hex(key, (file + ": root info " + kInfoNodeKey).c_str());
    id.source = source ? source : "file";
    return id;
  }
  const char* host = hwloc_obj_get_info_by_name(root, "HostName");
  id.name = host ? host : "unknown";
  id.key = fnv1a64(id.name);
  id.source = host ? "HostName in file" : "none in file";
  return id;
}

}  // namespace

struct TopologyReader {
  // `file` is empty for the live machine.
  static void read(Topology& t, hwloc_topology_t topo, const std::string& file) {
    const std::vector<GpuObject> objs = find_gpus(topo);
    const size_t n = objs.size();
    t.gpus_.clear();
    for (const GpuObject& g : objs) {
      GpuInfo info;
      info.pci_bus_id = address_of(g.pci).str();
      const char* model = info_of(g, kInfoModel);
      info.model = model ? model : "";
      hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, g.pci);
      if (cpu_side != nullptr) {
        info.cpu_affinity = list_string(cpu_side->cpuset);
        info.numa_affinity = list_string(cpu_side->nodeset);
        if (cpu_side->nodeset && hwloc_bitmap_weight(cpu_side->nodeset) == 1) {
          info.numa = hwloc_bitmap_first(cpu_side->nodeset);
        }
      }
      info.package = package_of(topo, cpu_side);
      const char* cluster = info_of(g, kInfoFabricCluster);
      const char* clique = info_of(g, kInfoFabricClique);
      if (cluster != nullptr && clique != nullptr) {
        info.domain_name = std::string(cluster) + "/" + clique;
        info.domain_key = fnv1a64(info.domain_name);
      }
      t.gpus_.push_back(std::move(info));
    }
    t.locality_.assign(n * n, plan::kLocalitySystem);
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        if (a != b) t.locality_[a * n + b] = pci_locality(topo, objs[a].pci, objs[b].pci, t.gpus_[a], t.gpus_[b]);
      }
    }
    const bool has_matrix = read_matrix(topo, objs, t.bandwidth_);
    const char* nvlink = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), kInfoNVLink);
    const std::string recorded = nvlink ? nvlink : "";
    if (recorded.rfind("none", 0) == 0) {
      t.link_source_ = LinkSource::kNone;
      const std::string why = recorded.size() > 6 ? recorded.substr(6) : "not recorded";
      t.link_status_ = "no NVLink information (" + why + ")";
    } else if (recorded == "nvml" || has_matrix) {
      t.link_source_ = file.empty() ? LinkSource::kNvml : LinkSource::kRecorded;
      t.link_status_ = file.empty() ? "NVLink information from NVML" : "NVLink information recorded in " + file;
    } else {
      t.link_source_ = LinkSource::kNone;
      t.link_status_ = "no NVLink information (no " + std::string(kMatrixName) + " matrix in " + file + ")";
    }
    if (!file.empty()) t.node_ = identity_from(topo, file);
  }
};

namespace {

void add_info(hwloc_obj_t obj, const char* name, const std::string& value) {
  if (hwloc_obj_get_info_by_name(obj, name) == nullptr) hwloc_obj_add_info(obj, name, value.c_str());
}

// Writes NVML's facts into the live hwloc topology, as hwloc data, so that they export with it.
void annotate(hwloc_topology_t topo, const NodeIdentity& id, const NvmlReport& report) {
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  add_info(root, kInfoNodeName, id.name);
  add_info(root, kInfoNodeKey, key_to_hex(id.key));
  add_info(root, kInfoNodeSource, id.source);
  if (!report.available) {
    add_info(root, kInfoNVLink, "none: " + report.status);
    return;
  }
  add_info(root, kInfoNVLink, "nvml");
  const std::vector<GpuObject> gpus = find_gpus(topo);
  std::vector<PciAddress> addresses;
  for (const GpuObject& g : gpus) addresses.push_back(address_of(g.pci));
  for (const GpuObject& g : gpus) {
    for (const NvmlGpu& ng : report.gpus) {
      if (!(ng.pci == address_of(g.pci))) continue;
      if (!ng.model.empty()) add_info(g.pci, kInfoModel, ng.model);
      if (ng.fabric_registered) {
        add_info(g.pci, kInfoFabricCluster, uuid_string(ng.cluster_uuid));
        add_info(g.pci, kInfoFabricClique, std::to_string(ng.clique_id));
      }
    }
  }
  if (gpus.size() < 2) return;  // no pair to describe
  const std::vector<uint32_t> bw = nvlink_bandwidth_matrix(report, addresses);
  std::vector<hwloc_obj_t> objs;
  for (const GpuObject& g : gpus) objs.push_back(g.pci);
  std::vector<hwloc_uint64_t> values(bw.begin(), bw.end());
  hwloc_distances_add_handle_t h = hwloc_distances_add_create(
      topo, kMatrixName, HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH, 0);
  BASP_CHECK(h != nullptr, BASP_ERROR_INTERNAL, "hwloc_distances_add_create failed: ", std::strerror(errno));
  BASP_CHECK(
      hwloc_distances_add_values(topo, h, static_cast<unsigned>(objs.size()), objs.data(), values.data(), 0) == 0,
      BASP_ERROR_INTERNAL, "hwloc_distances_add_values failed: ", std::strerror(errno));
  BASP_CHECK(hwloc_distances_add_commit(topo, h, 0) == 0, BASP_ERROR_INTERNAL,
             "hwloc_distances_add_commit failed: ", std::strerror(errno));
}

std::shared_ptr<HwlocHandle> new_hwloc() {
  auto h = std::make_shared<HwlocHandle>();
  BASP_CHECK(hwloc_topology_init(&h->topo) == 0, BASP_ERROR_OUT_OF_MEMORY,
             "hwloc_topology_init failed: ", std::strerror(errno));
  return h;
}

}  // namespace

Topology Topology::discover() {
  Topology t;
  t.node_ = local_node_identity();
  t.origin_ = "this machine (hwloc " + hwloc_version_string() + ")";
  auto h = new_hwloc();
  // GPUs, NICs and storage keep their PCI devices; bridges on their path are kept by hwloc too.
  hwloc_topology_set_io_types_filter(h->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  BASP_CHECK(hwloc_topology_load(h->topo) == 0, BASP_ERROR_INTERNAL,
             "hwloc_topology_load failed on this machine: ", std::strerror(errno));
  const NvmlReport report = probe_nvml();
  annotate(h->topo, t.node_, report);
  TopologyReader::read(t, h->topo, "");
  t.hwloc_ = std::move(h);
  if (t.gpus_.empty() && report.available && !report.gpus.empty()) {
    // hwloc sees none of NVML's GPUs (a container hiding the PCI tree): keep NVML's view, without locality.
    t.set_from_nvml(report, " (hwloc sees none of these GPUs: no PCI/NUMA locality, and an export omits them)");
  }
  return t;
}

Topology Topology::load_xml(const std::string& path) {
  {
    std::ifstream probe(path);
    BASP_CHECK_ARG(probe.good(), "topology file \"", path, "\" cannot be read: ", std::strerror(errno));
  }
  Topology t;
  t.origin_ = path;
  auto h = new_hwloc();
  // hwloc's XML import can crash on a malformed file (found by tests/fuzz): parse it in a child process first
  // and load what hwloc re-exported from it (topology/xml_sandbox.h).
  const std::string xml = sandboxed_hwloc_xml(path);
  BASP_CHECK_ARG(
      hwloc_topology_set_xmlbuffer(h->topo, xml.data(), static_cast<int>(xml.size() + 1)) == 0, "topology file \"",
      path, "\" is not a valid hwloc XML topology (hwloc_topology_set_xmlbuffer failed: ", std::strerror(errno), ")");
  // Keep every I/O object of the file: NVSwitch PCI devices carry DGX-2 style matrices.
  hwloc_topology_set_io_types_filter(h->topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  BASP_CHECK_ARG(hwloc_topology_load(h->topo) == 0, "topology file \"", path,
                 "\" is not a valid hwloc XML topology (hwloc_topology_load failed: ", std::strerror(errno), ")");
  TopologyReader::read(t, h->topo, path);
  t.hwloc_ = std::move(h);
  return t;
}

void Topology::export_xml(const std::string& path) const {
  BASP_CHECK(hwloc_ != nullptr, BASP_ERROR_INTERNAL, "topology has no hwloc data to export");
  BASP_CHECK_ARG(hwloc_topology_export_xml(hwloc_->topo, path.c_str(), 0) == 0, "topology file \"", path,
                 "\" cannot be written: ", std::strerror(errno));
}

}  // namespace basp::topology
