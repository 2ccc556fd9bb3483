#include "topology/nvml_probe.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "topology/nvml_api.h"

namespace basp::topology {

int32_t nvlink_count_for(int32_t cc_major, int32_t cc_minor) {
  const int32_t cc = cc_major * 10 + cc_minor;
  if (cc < 60) return 0;
  if (cc < 70) return 4;
  if (cc < 80) return 6;
  if (cc < 90) return 12;
  return 18;
}

uint32_t link_bandwidth_for(int32_t cc_major, int32_t cc_minor) {
  if (cc_major < 6) return 0;
  if (cc_major == 6) return 20000;
  if (cc_major == 8 && cc_minor != 0) return 14062;  // GA10x / AD10x NVLink bridges
  if (cc_major < 10) return 25000;
  return 50000;
}

std::string uuid_string(const std::array<uint8_t, 16>& u) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return buf;
}

namespace {

constexpr const char* kLibrary = "libnvidia-ml.so.1";

struct Api {
  void* lib = nullptr;
  std::string error;  // why the library is unusable; empty when usable
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn get_handle = nullptr;
  nvml::DeviceGetPciInfoFn get_pci = nullptr;
  nvml::DeviceGetNameFn get_name = nullptr;
  nvml::DeviceGetCudaComputeCapabilityFn get_cc = nullptr;
  nvml::DeviceGetNvLinkStateFn link_state = nullptr;
  nvml::DeviceGetNvLinkRemotePciInfoFn link_remote = nullptr;
  nvml::DeviceGetGpuFabricInfoVFn fabric = nullptr;  // optional: drivers before R550 lack it
};

template <typename Fn>
bool load(Api& api, Fn& fn, const char* name, bool required) {
  fn = reinterpret_cast<Fn>(dlsym(api.lib, name));
  if (fn == nullptr && required && api.error.empty()) api.error = std::string(kLibrary) + " lacks " + name;
  return fn != nullptr;
}

// The library stays loaded for the life of the process (NVML keeps state across init/shutdown pairs).
const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    a.lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (a.lib == nullptr) {
      const char* why = dlerror();
      a.error = std::string(kLibrary) + " could not be loaded (" + (why ? why : "unknown reason") + ")";
      return;
    }
    load(a, a.init, "nvmlInit_v2", true);
    load(a, a.shutdown, "nvmlShutdown", true);
    load(a, a.error_string, "nvmlErrorString", true);
    load(a, a.get_count, "nvmlDeviceGetCount_v2", true);
    load(a, a.get_handle, "nvmlDeviceGetHandleByIndex_v2", true);
    load(a, a.get_pci, "nvmlDeviceGetPciInfo_v3", true);
    load(a, a.get_name, "nvmlDeviceGetName", true);
    load(a, a.get_cc, "nvmlDeviceGetCudaComputeCapability", true);
    load(a, a.link_state, "nvmlDeviceGetNvLinkState", true);
    load(a, a.link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2", true);
    load(a, a.fabric, "nvmlDeviceGetGpuFabricInfoV", false);
  });
  return a;
}

std::string describe(const Api& a, const char* call, nvml::Return rc) {
  return std::string(call) + " failed: " + (a.error_string ? a.error_string(rc) : "error") + " (" + std::to_string(rc) +
         ")";
}

PciAddress address_of(const nvml::PciInfo& p) {
  // NVML reports no function number; NVIDIA GPUs and NVSwitches are function 0.
  return PciAddress{p.domain, p.bus, p.device, 0};
}

void read_links(const Api& a, nvml::Device dev, NvmlGpu& gpu) {
  const int32_t count = nvlink_count_for(gpu.cc_major, gpu.cc_minor);
  for (int32_t link = 0; link < count; ++link) {
    int state = 0;
    if (a.link_state(dev, static_cast<unsigned>(link), &state) != nvml::kSuccess) continue;
    if (state != nvml::kEnableStateEnabled) continue;
    nvml::PaddedPciInfo remote{};
    if (a.link_remote(dev, static_cast<unsigned>(link), &remote.info) != nvml::kSuccess) continue;
    NvmlLink l;
    l.remote = address_of(remote.info);
    l.remote_vendor = remote.info.pci_device_id & 0xffffu;
    gpu.links.push_back(l);
  }
}

void read_fabric(const Api& a, nvml::Device dev, NvmlGpu& gpu) {
  if (a.fabric == nullptr) return;
  // A v2 structure inside a larger zeroed buffer: the version field tells NVML which layout to write.
  struct {
    nvml::FabricInfoV2 info;
    unsigned char slack[64];
  } f{};
  f.info.version = nvml::kFabricInfoV2Version;
  if (a.fabric(dev, &f.info) != nvml::kSuccess) return;
  if (f.info.state != nvml::kFabricStateCompleted || f.info.status != nvml::kSuccess) return;
  std::array<uint8_t, 16> uuid{};
  std::memcpy(uuid.data(), f.info.cluster_uuid, uuid.size());
  bool any = false;
  for (uint8_t b : uuid) any = any || b != 0;
  if (!any) return;  // registered without a multi-node fabric
  gpu.fabric_registered = true;
  gpu.cluster_uuid = uuid;
  gpu.clique_id = f.info.clique_id;
}

}  // namespace

NvmlReport probe_nvml() {
  NvmlReport report;
  const Api& a = api();
  if (!a.error.empty()) {
    report.status = a.error;
    return report;
  }
  nvml::Return rc = a.init();
  if (rc != nvml::kSuccess) {
    report.status = describe(a, "nvmlInit_v2", rc);
    return report;
  }
  unsigned int count = 0;
  rc = a.get_count(&count);
  if (rc != nvml::kSuccess) {
    report.status = describe(a, "nvmlDeviceGetCount_v2", rc);
    a.shutdown();
    return report;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvml::Device dev = nullptr;
    rc = a.get_handle(i, &dev);
    if (rc != nvml::kSuccess) {
      report.status = describe(a, "nvmlDeviceGetHandleByIndex_v2", rc);
      a.shutdown();
      return report;
    }
    NvmlGpu gpu;
    nvml::PaddedPciInfo pci{};
    rc = a.get_pci(dev, &pci.info);
    if (rc != nvml::kSuccess) {
      report.status = describe(a, "nvmlDeviceGetPciInfo_v3", rc);
      a.shutdown();
      return report;
    }
    gpu.pci = address_of(pci.info);
    char name[nvml::kDeviceNameBufferSize] = {};
    if (a.get_name(dev, name, sizeof(name)) == nvml::kSuccess) gpu.model = name;
    int major = 0;
    int minor = 0;
    if (a.get_cc(dev, &major, &minor) == nvml::kSuccess) {
      gpu.cc_major = major;
      gpu.cc_minor = minor;
    }
    gpu.link_bandwidth = link_bandwidth_for(gpu.cc_major, gpu.cc_minor);
    read_links(a, dev, gpu);
    read_fabric(a, dev, gpu);
    report.gpus.push_back(std::move(gpu));
  }
  a.shutdown();
  report.available = true;
  report.status = "NVML: " + std::to_string(count) + " GPU(s)";
  return report;
}

}  // namespace basp::topology
