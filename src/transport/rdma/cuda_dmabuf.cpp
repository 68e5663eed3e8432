#include "transport/rdma/cuda_dmabuf.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <mutex>
#include <string>

#include <fmt/format.h>

namespace hawser::rdma {

namespace {
// Values from cuda.h (stable driver ABI).
constexpr int kCuSuccess = 0;
constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE
constexpr int kRangeHandleDmaBufFd = 1;         // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
}  // namespace

const CudaDriver* CudaDriver::get() {
  static const CudaDriver* driver = [] () -> const CudaDriver* {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    auto* d = new CudaDriver();
    d->cuInit_ = reinterpret_cast<decltype(d->cuInit_)>(dlsym(h, "cuInit"));
    d->cuPointerGetAttribute_ = reinterpret_cast<decltype(d->cuPointerGetAttribute_)>(dlsym(h, "cuPointerGetAttribute"));
    d->cuMemGetAddressRange_ = reinterpret_cast<decltype(d->cuMemGetAddressRange_)>(dlsym(h, "cuMemGetAddressRange_v2"));
    d->cuMemGetHandleForAddressRange_ =
        reinterpret_cast<decltype(d->cuMemGetHandleForAddressRange_)>(dlsym(h, "cuMemGetHandleForAddressRange"));
    d->cuDeviceGet_ = reinterpret_cast<decltype(d->cuDeviceGet_)>(dlsym(h, "cuDeviceGet"));
    d->cuDeviceGetPCIBusId_ = reinterpret_cast<decltype(d->cuDeviceGetPCIBusId_)>(dlsym(h, "cuDeviceGetPCIBusId"));
    if (!d->cuInit_ || !d->cuPointerGetAttribute_ || d->cuInit_(0) != kCuSuccess) {
      delete d;
      return nullptr;
    }
    return d;
  }();
  return driver;
}

bool CudaDriver::isDevicePointer(const void* addr) const {
  unsigned type = 0;
  if (cuPointerGetAttribute_(&type, kPointerAttributeMemoryType, reinterpret_cast<unsigned long long>(addr)) !=
      kCuSuccess)
    return false;
  return type == kMemoryTypeDevice;
}

Status CudaDriver::dmabuf(const void* addr, size_t len, int& fd, uint64_t& offset) const {
  if (!cuMemGetAddressRange_ || !cuMemGetHandleForAddressRange_)
    return Status(Code::kNotSupported, "CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7+)");
  unsigned long long base = 0;
  size_t size = 0;
  auto dptr = reinterpret_cast<unsigned long long>(addr);
  int rc = cuMemGetAddressRange_(&base, &size, dptr);
  if (rc != kCuSuccess)
    return Status(Code::kInvalidArgument, fmt::format("cuMemGetAddressRange({:#x}) failed: CUresult {}", dptr, rc));
  if (dptr + len > base + size)
    return Status(Code::kInvalidArgument,
                  fmt::format("GPU range [{:#x}, +{}) crosses the end of its allocation", dptr, len));
  // dma-buf export works on whole host pages of the allocation.
  const unsigned long long page = static_cast<unsigned long long>(sysconf(_SC_PAGESIZE));
  unsigned long long start = base & ~(page - 1);
  unsigned long long end = (base + size + page - 1) & ~(page - 1);
  int out = -1;
  rc = cuMemGetHandleForAddressRange_(&out, start, end - start, kRangeHandleDmaBufFd, 0);
  if (rc != kCuSuccess || out < 0)
    return Status(Code::kNotSupported, fmt::format("cuMemGetHandleForAddressRange(dma-buf) failed: CUresult {}", rc));
  fd = out;
  offset = dptr - start;
  return Status::OK();
}

int CudaDriver::numaNode(int ordinal) const {
  if (!cuDeviceGet_ || !cuDeviceGetPCIBusId_) return -1;
  int dev = 0;
  if (cuDeviceGet_(&dev, ordinal) != kCuSuccess) return -1;
  char bus[64] = {0};
  if (cuDeviceGetPCIBusId_(bus, sizeof(bus), dev) != kCuSuccess) return -1;
  std::string id(bus);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int n = -1;
  if (f >> n) return n < 0 ? -1 : n;
  return -1;
}

}  // namespace hawser::rdma
