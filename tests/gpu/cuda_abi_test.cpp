// src/gpu/cuda_api.h declares the driver's constants itself (hawser builds
// without cuda.h). Where the CUDA toolkit is installed, this checks them
// against cuda.h, at compile time.
#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

#include "gpu/cuda_api.h"

#if HAWSER_HAVE_CUDA_H
#include <cuda.h>

namespace cu = hawser::gpu::cu;
static_assert(cu::kSuccess == CUDA_SUCCESS);
static_assert(cu::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(cu::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(cu::kErrorHostMemoryAlreadyRegistered == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
static_assert(cu::kErrorNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(cu::kPointerAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(cu::kPointerAttributeDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(cu::kMemoryTypeHost == CU_MEMORYTYPE_HOST);
static_assert(cu::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(cu::kMemoryTypeUnified == CU_MEMORYTYPE_UNIFIED);
static_assert(cu::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(cu::kMemHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(cu::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(cu::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(cu::kIpcLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(cu::kRangeHandleDmaBufFd == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
static_assert(cu::kIpcHandleSize == CU_IPC_HANDLE_SIZE);
static_assert(sizeof(cu::IpcMemHandle) == sizeof(CUipcMemHandle));
static_assert(sizeof(cu::DevicePtr) == sizeof(CUdeviceptr));
static_assert(cu::kPointerAttributeIsLegacyCudaIpcCapable == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE);
static_assert(cu::kPointerAttributeIsGpuDirectRdmaCapable == CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE);
// Virtual memory management: constants, and the structs' layout field by field.
static_assert(sizeof(cu::MemHandle) == sizeof(CUmemGenericAllocationHandle));
static_assert(cu::kMemAllocationTypePinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(cu::kMemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(cu::kMemHandleTypeNone == CU_MEM_HANDLE_TYPE_NONE);
static_assert(cu::kMemHandleTypePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(cu::kMemAccessProtReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(cu::kMemAllocGranularityMinimum == CU_MEM_ALLOC_GRANULARITY_MINIMUM);
static_assert(sizeof(cu::MemLocation) == sizeof(CUmemLocation));
static_assert(offsetof(cu::MemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(cu::MemAllocationProp) == sizeof(CUmemAllocationProp));
static_assert(offsetof(cu::MemAllocationProp, requestedHandleTypes) == offsetof(CUmemAllocationProp, requestedHandleTypes));
static_assert(offsetof(cu::MemAllocationProp, location) == offsetof(CUmemAllocationProp, location));
static_assert(offsetof(cu::MemAllocationProp, win32HandleMetaData) == offsetof(CUmemAllocationProp, win32HandleMetaData));
static_assert(offsetof(cu::MemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(offsetof(cu::MemAllocationProp, allocFlags.gpuDirectRDMACapable) ==
              offsetof(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable));
static_assert(sizeof(cu::MemAccessDesc) == sizeof(CUmemAccessDesc));
static_assert(offsetof(cu::MemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));

// The copy kernel's launch and the batched copy.
static_assert(cu::kErrorPeerAccessAlreadyEnabled == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
static_assert(cu::kDeviceAttributeMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(cu::kMemcpySrcAccessOrderStream == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
static_assert(sizeof(cu::MemcpyAttributes) == sizeof(CUmemcpyAttributes));
static_assert(offsetof(cu::MemcpyAttributes, srcLocHint) == offsetof(CUmemcpyAttributes, srcLocHint));
static_assert(offsetof(cu::MemcpyAttributes, dstLocHint) == offsetof(CUmemcpyAttributes, dstLocHint));
static_assert(offsetof(cu::MemcpyAttributes, flags) == offsetof(CUmemcpyAttributes, flags));
// cuMemcpyBatchAsync_v2 is CUDA 13's signature (no failIdx): the one hawser resolves.
static_assert(std::is_same_v<decltype(&cuMemcpyBatchAsync),  // cuda.h maps it to cuMemcpyBatchAsync_v2
                             CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*,
                                          size_t, CUstream)>);

// (The checks above are static_asserts: this file does not build if one fails.)
TEST(cuda_abi, toolkit_is_new_enough_for_dmabuf_export) { EXPECT_GE(CUDA_VERSION, 11070) << CUDA_VERSION; }
#else
TEST(cuda_abi, toolkit_is_new_enough_for_dmabuf_export) { GTEST_SKIP() << "no cuda.h on this host (CUDA toolkit not installed)"; }
#endif
