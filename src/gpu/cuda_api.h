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
using Module = struct ModuleSt*;        // CUmodule
using Function = struct FuncSt*;        // CUfunction

inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidValue = 1;
inline constexpr Result kErrorNotReady = 600;
inline constexpr Result kErrorHostMemoryAlreadyRegistered = 712;
inline constexpr Result kErrorNotSupported = 801;
inline constexpr Result kErrorPeerAccessAlreadyEnabled = 704;
inline constexpr int kDeviceAttributeMultiprocessorCount = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr int kMemcpySrcAccessOrderStream = 1;           // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM

inline constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
inline constexpr int kPointerAttributeIsLegacyCudaIpcCapable = 10;  // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
inline constexpr int kPointerAttributeIsGpuDirectRdmaCapable = 15;  // CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
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

// Virtual memory management (cuMemCreate / cuMemAddressReserve / cuMemMap):
// how applications (PyTorch's expandable segments, NCCL) allocate device
// memory that hawser may be given to register.
using MemHandle = unsigned long long;                     // CUmemGenericAllocationHandle
inline constexpr int kMemAllocationTypePinned = 1;        // CU_MEM_ALLOCATION_TYPE_PINNED
inline constexpr int kMemLocationTypeDevice = 1;          // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kMemHandleTypeNone = 0;              // CU_MEM_HANDLE_TYPE_NONE
inline constexpr int kMemHandleTypePosixFd = 1;           // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr int kMemAccessProtReadWrite = 3;         // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
inline constexpr int kMemAllocGranularityMinimum = 0;     // CU_MEM_ALLOC_GRANULARITY_MINIMUM

struct MemLocation {  // CUmemLocation
  int type;
  int id;
};

struct MemAllocationProp {  // CUmemAllocationProp
  int type;                  // kMemAllocationType*
  int requestedHandleTypes;  // kMemHandleType*
  MemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;  // the NIC may reach it (GPUDirect RDMA, dma-buf export for a NIC)
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct MemAccessDesc {  // CUmemAccessDesc
  MemLocation location;
  int flags;  // kMemAccessProt*
};

// Attributes of the copies of a batch (cuMemcpyBatchAsync).
struct MemcpyAttributes {  // CUmemcpyAttributes
  int srcAccessOrder;      // kMemcpySrcAccessOrder*
  MemLocation srcLocHint;
  MemLocation dstLocHint;
  unsigned flags;
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
  // Optional: virtual memory management (CUDA 10.2+).
  Result (*MemCreate)(MemHandle*, size_t, const MemAllocationProp*, unsigned long long);  // cuMemCreate
  Result (*MemRelease)(MemHandle);                                                        // cuMemRelease
  Result (*MemAddressReserve)(DevicePtr*, size_t, size_t, DevicePtr, unsigned long long);  // cuMemAddressReserve
  Result (*MemAddressFree)(DevicePtr, size_t);                                            // cuMemAddressFree
  Result (*MemMap)(DevicePtr, size_t, size_t, MemHandle, unsigned long long);             // cuMemMap
  Result (*MemUnmap)(DevicePtr, size_t);                                                  // cuMemUnmap
  Result (*MemSetAccess)(DevicePtr, size_t, const MemAccessDesc*, size_t);                // cuMemSetAccess
  Result (*MemGetAllocationGranularity)(size_t*, const MemAllocationProp*, int);          // cuMemGetAllocationGranularity
  // Optional: sharing virtual memory between processes (a POSIX fd per
  // physical allocation: gpu/vmm.h).
  Result (*MemRetainAllocationHandle)(MemHandle*, void*);                                 // cuMemRetainAllocationHandle
  Result (*MemGetAllocationPropertiesFromHandle)(MemAllocationProp*, MemHandle);          // cuMemGetAllocationPropertiesFromHandle
  Result (*MemExportToShareableHandle)(void*, MemHandle, int, unsigned long long);        // cuMemExportToShareableHandle
  Result (*MemImportFromShareableHandle)(MemHandle*, void*, int);                         // cuMemImportFromShareableHandle
  // Optional: modules and launches (hawser's copy kernel, gpu/copy_kernel.h).
  Result (*ModuleLoadData)(Module*, const void*);                     // cuModuleLoadData
  Result (*ModuleUnload)(Module);                                     // cuModuleUnload
  Result (*ModuleGetFunction)(Function*, Module, const char*);        // cuModuleGetFunction
  Result (*LaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Stream,
                         void**, void**);                             // cuLaunchKernel
  Result (*DeviceGetAttribute)(int*, int, Device);                    // cuDeviceGetAttribute
  Result (*CtxEnablePeerAccess)(Context, unsigned);                   // cuCtxEnablePeerAccess
  // Optional: the driver's batched copy (CUDA 13's signature, symbol cuMemcpyBatchAsync_v2).
  Result (*MemcpyBatchAsync)(DevicePtr*, DevicePtr*, size_t*, size_t, MemcpyAttributes*, size_t*, size_t, Stream);
};

}  // namespace hawser::gpu::cu
