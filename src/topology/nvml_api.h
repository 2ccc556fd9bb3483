// The few NVML types and entry points libbasp uses, declared here so that nothing links against NVML: the
// library is opened with dlopen("libnvidia-ml.so.1") at run time (nvml_probe.cpp) and a machine without the
// NVIDIA driver simply has no NVLink information. Layouts follow NVML's published ABI (nvml.h, API version 12);
// only fields at stable offsets are read, and buffers handed to NVML are padded in case a newer library writes
// a larger structure.
#pragma once

#include <cstdint>

namespace basp::topology::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;

struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

constexpr int kEnableStateEnabled = 1;  // nvmlEnableState_t NVML_FEATURE_ENABLED

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;  // (device id << 16) | vendor id
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

struct PaddedPciInfo {
  PciInfo info;
  unsigned char slack[64];
};

// nvmlGpuFabricInfo_v2_t (nvmlGpuFabricInfoV_t): GPUs of one multi-node NVLink domain share cluster_uuid and
// clique_id once the fabric manager has registered them (state == kFabricStateCompleted, status == kSuccess).
struct FabricInfoV2 {
  unsigned int version;
  unsigned char cluster_uuid[16];
  Return status;
  unsigned int clique_id;
  unsigned char state;
  unsigned int health_mask;
};

constexpr unsigned char kFabricStateCompleted = 3;
constexpr unsigned int kFabricInfoV2Version = static_cast<unsigned int>(sizeof(FabricInfoV2)) | (2u << 24);

constexpr unsigned int kDeviceNameBufferSize = 96;

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using DeviceGetCountFn = Return (*)(unsigned int*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);
using DeviceGetNameFn = Return (*)(Device, char*, unsigned int);
using DeviceGetCudaComputeCapabilityFn = Return (*)(Device, int*, int*);
using DeviceGetNvLinkStateFn = Return (*)(Device, unsigned int, int*);
using DeviceGetNvLinkRemotePciInfoFn = Return (*)(Device, unsigned int, PciInfo*);
using DeviceGetGpuFabricInfoVFn = Return (*)(Device, FabricInfoV2*);

}  // namespace basp::topology::nvml
