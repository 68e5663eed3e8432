// The cuFile (GPUDirect Storage) API as the file transport uses it: our own
// declarations of the few types, constants and entry points, so that the
// build needs no cufile.h (like gpu/cuda_api.h for the CUDA driver). Values
// and layouts are those of cufile.h of libcufile 1.15 (CUDA 13); see
// /work/shared/research/storage_metadata.md section 1. Entry points are
// resolved by name from file.cufile_lib at run time (cufile_library.cpp).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>

namespace hawser::file::cufile {

// CUfileError_t: the cuFile error and, for 5011, the CUDA driver's.
struct Error {
  int err;     // CUfileOpError
  int cu_err;  // CUresult
};

inline constexpr int kSuccess = 0;
inline constexpr int kBaseErr = 5000;
inline constexpr int kDriverNotInitialized = 5001;
inline constexpr int kPlatformNotSupported = 5007;
inline constexpr int kIoNotSupported = 5008;
inline constexpr int kCudaDriverError = 5011;
inline constexpr int kInvalidFileOpenFlag = 5019;
inline constexpr int kDioNotSet = 5020;
inline constexpr int kInvalidValue = 5022;
inline constexpr int kMemoryAlreadyRegistered = 5023;
inline constexpr int kMemoryNotRegistered = 5024;
inline constexpr int kPermissionDenied = 5025;
inline constexpr int kDriverAlreadyOpen = 5026;
inline constexpr int kHandleNotRegistered = 5027;
inline constexpr int kHandleAlreadyRegistered = 5028;
inline constexpr int kInternalError = 5030;

inline constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
inline constexpr int kBatchMode = 1;           // CUFILE_BATCH
inline constexpr int kOpRead = 0;              // CUFILE_READ
inline constexpr int kOpWrite = 1;             // CUFILE_WRITE

// CUfileStatus_t
inline constexpr int kStatusWaiting = 0x01;
inline constexpr int kStatusPending = 0x02;
inline constexpr int kStatusInvalid = 0x04;
inline constexpr int kStatusCanceled = 0x08;
inline constexpr int kStatusComplete = 0x10;
inline constexpr int kStatusTimeout = 0x20;
inline constexpr int kStatusFailed = 0x40;

using Handle = void*;       // CUfileHandle_t
using BatchHandle = void*;  // CUfileBatchHandle_t

struct Descr {  // CUfileDescr_t
  int type;     // kHandleTypeOpaqueFd
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // nullptr: the library's own
};

struct IoParams {  // CUfileIOParams_t
  int mode;        // kBatchMode; must be first
  union {
    struct {
      void* devPtr_base;
      off_t file_offset;
      off_t devPtr_offset;
      size_t size;
    } batch;
  } u;
  Handle fh;
  int opcode;
  void* cookie;
};

struct IoEvents {  // CUfileIOEvents_t
  void* cookie;
  int status;
  size_t ret;  // bytes, or a negative error (as ssize_t)
};

struct DrvProps {  // CUfileDrvProps_t
  struct {
    unsigned major_version;
    unsigned minor_version;
    size_t poll_thresh_size;
    size_t max_direct_io_size;
    unsigned dstatusflags;
    unsigned dcontrolflags;
  } nvfs;
  unsigned fflags;
  unsigned max_device_cache_size;
  unsigned per_buffer_cache_size;
  unsigned max_device_pinned_mem_size;
  unsigned max_batch_io_size;
  unsigned max_batch_io_timeout_msecs;
};

// The entry points, by the symbol each is resolved from.
struct Api {
  Error (*DriverOpen)();                                                    // cuFileDriverOpen
  Error (*DriverGetProperties)(DrvProps*);                                  // cuFileDriverGetProperties
  Error (*HandleRegister)(Handle*, Descr*);                                 // cuFileHandleRegister
  void (*HandleDeregister)(Handle);                                         // cuFileHandleDeregister
  Error (*BufRegister)(const void*, size_t, int);                           // cuFileBufRegister
  Error (*BufDeregister)(const void*);                                      // cuFileBufDeregister
  Error (*BatchIOSetUp)(BatchHandle*, unsigned);                            // cuFileBatchIOSetUp
  Error (*BatchIOSubmit)(BatchHandle, unsigned, IoParams*, unsigned);       // cuFileBatchIOSubmit
  Error (*BatchIOGetStatus)(BatchHandle, unsigned, unsigned*, IoEvents*, timespec*);  // cuFileBatchIOGetStatus
  Error (*BatchIOCancel)(BatchHandle);                                      // cuFileBatchIOCancel
  void (*BatchIODestroy)(BatchHandle);                                      // cuFileBatchIODestroy
  // Optional (nullptr when absent).
  Error (*GetVersion)(int*);                                                // cuFileGetVersion
};

}  // namespace hawser::file::cufile
