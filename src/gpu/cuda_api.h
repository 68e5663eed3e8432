// The CUDA driver API as hawser uses it: our own declarations of the few
// types, constants and entry points, so that nothing here needs cuda.h to
// build. The values are the driver's stable ABI (cuda.h of CUDA 13);
// tests/gpu/cuda_abi_test.cpp checks them against cuda.h where the toolkit
// is installed. Entry points are resolved by name from libcuda.so.1 at run
// time (gpu/cuda_driver.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hawser::gpu::cu {

using Result = int;                     // CUresult
using DevicePtr = unsigned long long;  // CUdeviceptr
using Device = int;                     // CUdevice
using Context = struct CtxSt*;          // CUcontext
using Stream = struct StreamSt*;        // CUstream
using Event = struct EventSt*;          // CUevent

inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidValue = 1;
inline constexpr Result kErrorNotReady = 600;
inline constexpr Result kErrorHostMemoryAlreadyRegistered = 712;
inline constexpr Result kErrorNotSupported = 801;

inline constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
inline constexpr unsigned kMemoryTypeHost = 1;            // CU_MEMORYTYPE_HOST
inline constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE
inline constexpr unsigned kMemoryTypeUnified = 4;         // CU_MEMORYTYPE_UNIFIED
inline constexpr unsigned kMemHostAllocPortable = 1;      // CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kMemHostRegisterPortable = 1;   // CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned kStreamNonBlocking = 1;         // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventBlockingSync = 1;         // CU_EVENT_BLOCKING_SYNC
inline constexpr unsigned kEventDisableTiming = 2;        // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kIpcLazyEnablePeerAccess = 1;   // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
inline constexpr int kRangeHandleDmaBufFd = 1;            // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
inline constexpr size_t kIpcHandleSize = 64;              // CU_IPC_HANDLE_SIZE

struct IpcMemHandle {  // CUipcMemHandle
  char reserved[kIpcHandleSize];
};

// The entry points, by the symbol each is resolved from.
struct Api {
  Result (*Init)(unsigned);                                             // cuInit
  Result (*DeviceGetCount)(int*);                                       // cuDeviceGetCount
  Result (*DeviceGet)(Device*, int);                                    // cuDeviceGet
  Result (*DeviceGetPCIBusId)(char*, int, Device);                      // cuDeviceGetPCIBusId
  Result (*DevicePrimaryCtxRetain)(Context*, Device);                   // cuDevicePrimaryCtxRetain
  Result (*CtxSetCurrent)(Context);                                     // cuCtxSetCurrent
  Result (*CtxGetCurrent)(Context*);                                    // cuCtxGetCurrent
  Result (*PointerGetAttribute)(void*, int, DevicePtr);                 // cuPointerGetAttribute
  Result (*MemGetAddressRange)(DevicePtr*, size_t*, DevicePtr);         // cuMemGetAddressRange_v2
  Result (*MemAlloc)(DevicePtr*, size_t);                               // cuMemAlloc_v2
  Result (*MemFree)(DevicePtr);                                         // cuMemFree_v2
  Result (*MemHostAlloc)(void**, size_t, unsigned);                     // cuMemHostAlloc
  Result (*MemFreeHost)(void*);                                         // cuMemFreeHost
  Result (*MemHostRegister)(void*, size_t, unsigned);                   // cuMemHostRegister_v2
  Result (*MemHostUnregister)(void*);                                   // cuMemHostUnregister
  Result (*Memcpy)(DevicePtr, DevicePtr, size_t);                       // cuMemcpy
  Result (*MemcpyAsync)(DevicePtr, DevicePtr, size_t, Stream);          // cuMemcpyAsync
  Result (*MemcpyPeerAsync)(DevicePtr, Context, DevicePtr, Context, size_t, Stream);  // cuMemcpyPeerAsync
  Result (*MemsetD8)(DevicePtr, unsigned char, size_t);                 // cuMemsetD8_v2
  Result (*StreamCreate)(Stream*, unsigned);                            // cuStreamCreate
  Result (*StreamDestroy)(Stream);                                      // cuStreamDestroy_v2
  Result (*StreamSynchronize)(Stream);                                  // cuStreamSynchronize
  Result (*EventCreate)(Event*, unsigned);                              // cuEventCreate
  Result (*EventDestroy)(Event);                                        // cuEventDestroy_v2
  Result (*EventRecord)(Event, Stream);                                 // cuEventRecord
  Result (*EventQuery)(Event);                                          // cuEventQuery
  Result (*EventSynchronize)(Event);                                    // cuEventSynchronize
  Result (*IpcGetMemHandle)(IpcMemHandle*, DevicePtr);                  // cuIpcGetMemHandle
  Result (*IpcOpenMemHandle)(DevicePtr*, IpcMemHandle, unsigned);       // cuIpcOpenMemHandle_v2
  Result (*IpcCloseMemHandle)(DevicePtr);                               // cuIpcCloseMemHandle
  Result (*GetErrorString)(Result, const char**);                       // cuGetErrorString
  // Optional (nullptr when the driver lacks it): CUDA 11.7+.
  Result (*MemGetHandleForAddressRange)(void*, DevicePtr, size_t, int, unsigned long long);
};

}  // namespace hawser::gpu::cu
