/*
 * A stand-in libnvidia-ml.so.1 for tests on machines without an NVIDIA driver: it answers the NVML calls libbasp
 * makes with a fixed machine chosen by BASP_FAKE_NVML_MODE, so that the dlopen path, the link iteration and the
 * fabric registration are exercised end to end. Layouts are transcribed from NVML's documentation (nvml.h, API
 * version 12) independently of src/topology/nvml_api.h.
 *
 *   switch    4 GPUs of compute capability 10.0 (a GB200 tray), 18 links each to NVSwitches (vendor 0x10de),
 *             registered in one fabric cluster, clique 5
 *   bridge    4 GPUs of compute capability 8.6, NVLink bridges 0-1 and 2-3 (4 links each), one link of GPU 0 to an
 *             IBM NPU, and links 12..17 of every GPU "enabled" towards GPU 1 although sm86 has only 12 links
 *   initfail  nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED
 */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct fake_device* nvmlDevice_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct {
  unsigned int version;
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

enum { kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kDriverNotLoaded = 9 };

struct fake_device {
  int index;
};

static struct fake_device g_devices[4] = {{0}, {1}, {2}, {3}};
static const unsigned g_bus[4] = {0x07, 0x0f, 0x47, 0x4e};

int basp_fake_nvml_marker = 1;

static const char* mode(void) {
  const char* m = getenv("BASP_FAKE_NVML_MODE");
  return m ? m : "switch";
}

static int is(const char* m) { return strcmp(mode(), m) == 0; }

static int valid(nvmlDevice_t d) { return d >= g_devices && d < g_devices + 4; }

static void fill_pci(nvmlPciInfo_t* p, unsigned bus, unsigned vendor, unsigned device_id) {
  memset(p, 0, sizeof(*p));
  p->domain = 0;
  p->bus = bus;
  p->device = 0;
  p->pciDeviceId = (device_id << 16) | vendor;
}

nvmlReturn_t nvmlInit_v2(void) { return is("initfail") ? kDriverNotLoaded : kSuccess; }
nvmlReturn_t nvmlShutdown(void) { return kSuccess; }

const char* nvmlErrorString(nvmlReturn_t r) {
  return r == kDriverNotLoaded ? "Driver Not Loaded" : r == kNotSupported ? "Not Supported" : "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 4;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= 4) return kInvalidArgument;
  *d = &g_devices[i];
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* p) {
  if (!valid(d)) return kInvalidArgument;
  fill_pci(p, g_bus[d->index], 0x10de, 0x2941);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned length) {
  if (!valid(d) || length < 16) return kInvalidArgument;
  strcpy(name, is("switch") ? "Fake GB200" : "Fake RTX A6000");
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  if (!valid(d)) return kInvalidArgument;
  *major = is("switch") ? 10 : 8;
  *minor = is("switch") ? 0 : 6;
  return kSuccess;
}

/* Which device link `link` of GPU `g` reaches: bus and vendor; returns 0 for an inactive link. */
static int far_end(int g, unsigned link, unsigned* bus, unsigned* vendor) {
  if (is("switch")) {
    if (link >= 18) return 0;
    *bus = 0xc0 + link % 4; /* four NVSwitch devices */
    *vendor = 0x10de;
    return 1;
  }
  if (link >= 12) { /* beyond sm86's 12 links: must never be asked, and would pair every GPU with GPU 1 */
    *bus = g_bus[1];
    *vendor = 0x10de;
    return 1;
  }
  if (link < 4) {
    *bus = g_bus[g ^ 1];
    *vendor = 0x10de;
    return 1;
  }
  if (g == 0 && link == 4) {
    *bus = 0x99;
    *vendor = 0x1014; /* IBM NPU: a CPU */
    return 1;
  }
  return 0;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned link, int* active) {
  unsigned bus, vendor;
  if (!valid(d)) return kInvalidArgument;
  if (link >= 18) return kInvalidArgument;
  *active = far_end(d->index, link, &bus, &vendor);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned link, nvmlPciInfo_t* p) {
  unsigned bus, vendor;
  if (!valid(d) || !far_end(d->index, link, &bus, &vendor)) return kInvalidArgument;
  fill_pci(p, bus, vendor, vendor == 0x10de && bus >= 0xc0 ? 0x22a3 : 0x2941);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfo_v2_t* f) {
  static const unsigned char uuid[16] = {0x5c, 0x4f, 0x3b, 0x1e, 0x9a, 0x27, 0x4d, 0x68,
                                         0x8b, 0x0f, 0x2e, 0x7d, 0x6c, 0x5a, 0x4b, 0x39};
  if (!valid(d)) return kInvalidArgument;
  if ((f->version >> 24) != 2 || (f->version & 0xffffff) != sizeof(nvmlGpuFabricInfo_v2_t)) return kInvalidArgument;
  if (!is("switch")) return kNotSupported;
  memcpy(f->clusterUuid, uuid, 16);
  f->status = kSuccess;
  f->cliqueId = 5;
  f->state = 3; /* NVML_GPU_FABRIC_STATE_COMPLETED */
  f->healthMask = 0;
  return kSuccess;
}
