// A stand-in for libcuda.so.1 with the entry points hawser resolves
// (src/gpu/cuda_api.h), so that the GPU paths run in CI, which has no GPU.
// It simulates what makes GPU memory hard to get right, not a GPU:
//
// - "Device memory" lives at addresses the process cannot touch: a range
//   reserved PROT_NONE. Any host load or store there is a SIGSEGV, as a
//   host access to real device memory is. Only this library's copies reach
//   the bytes, through a second (shared, memfd) mapping.
// - Copies are asynchronous: each stream has its own thread that runs its
//   queue in order, and events complete when the stream reaches them. Code
//   that reads a staging buffer before its copy's event is done sees stale
//   bytes, as it would on a GPU.
// - Each allocation is its own memfd. IPC handles name the owner's fd;
//   another process opens them through /proc/<pid>/fd, as CUDA IPC maps the
//   owner's memory. A dma-buf export is a duplicate of that fd.
// - Virtual memory management: cuMemCreate makes a physical allocation (a
//   memfd), cuMemAddressReserve a range of device addresses, cuMemMap maps
//   an allocation (or part of one) into it. cuMemExportToShareableHandle
//   (POSIX fd, where cuMemCreate requested that handle type) gives a
//   duplicate of the memfd; another process that receives it (SCM_RIGHTS)
//   imports it with cuMemImportFromShareableHandle and maps the same bytes. cuMemGetAddressRange names one
//   mapping, as the real driver does. A dma-buf of a mapped range is a new
//   memfd laid out in address order, onto which the mapped pages are moved
//   (copied, then the allocations' pages remapped there), so that the fd
//   and the device addresses keep sharing the bytes; a later export of an
//   overlapping range moves them again and detaches the earlier fd.
//   cuPointerGetAttribute tells mapped memory (not legacy-IPC capable) and
//   whether its allocation asked for gpuDirectRDMACapable.
//
// - Modules and launches: cuModuleLoadData accepts PTX text that declares
//   `.entry hawser_copy_pieces` (hawser's copy kernel) and nothing else;
//   cuLaunchKernel of it runs, on the stream's thread, what the kernel does:
//   it reads the piece list from device memory and copies each piece. A
//   piece outside live memory is a fault, as on a GPU: the stream's events
//   report CUDA_ERROR_ILLEGAL_ADDRESS from then on (sticky). The batched
//   copy (cuMemcpyBatchAsync_v2) checks every copy, then runs them as one
//   operation.
//
// HAWSER_FAKE_CUDA_DEVICES sets the GPU count (default 2); 0 makes cuInit
// fail as it does on a host with a driver and no GPU. Test hooks (not
// CUDA, at the end of this file) count the calls and make launches fail.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using Result = int;
using DevicePtr = unsigned long long;
constexpr Result kOk = 0, kInvalidValue = 1, kNotInitialized = 3, kNoDevice = 100, kInvalidContext = 201,
                 kInvalidPtx = 218, kInvalidHandle = 400, kNotFound = 500, kNotReady = 600, kIllegalAddress = 700,
                 kPeerAccessAlreadyEnabled = 704, kAlreadyRegistered = 712, kNotRegistered = 713,
                 kNotSupported = 801;

constexpr size_t kDeviceSpace = 64ull << 30;  // address space reserved for device memory
constexpr size_t kAlign = 4096;

struct Allocation {
  uint64_t size;
  char* shadow;  // where the bytes are, for this library
  int fd;        // the memfd holding them (own allocations), -1 for opened ones
  int device;
  bool opened;   // mapped from another process's handle
  bool mapped = false;      // a cuMemMap mapping of a physical allocation
  uint64_t handle = 0;      // that allocation (cuMemCreate handle)
};

// A cuMemCreate allocation.
struct Physical {
  uint64_t size;
  char* shadow;  // its bytes, for this library (what mappings point into)
  int fd;
  int device;
  bool rdma;     // allocFlags.gpuDirectRDMACapable
  int handle_types = 0;  // requestedHandleTypes
  int maps = 0;  // live mappings
  int refs = 1;  // cuMemCreate / cuMemImportFromShareableHandle / cuMemRetainAllocationHandle, less cuMemRelease
  bool imported = false;  // from another process's fd
};
constexpr uint64_t kGranularity = 2ull << 20;  // as the real driver reports for device memory

std::mutex g_mu;
bool g_init = false;
int g_devices = 0;
char* g_space = nullptr;  // PROT_NONE: device addresses
uint64_t g_next = 0;      // bump allocator over g_space (addresses are never reused)
std::map<uint64_t, Allocation> g_allocs;  // by device address
std::map<uint64_t, uint64_t> g_host;      // page-locked host ranges: addr -> size
std::map<uint64_t, Physical> g_phys;      // cuMemCreate allocations by handle
uint64_t g_next_handle = 1;
std::map<uint64_t, uint64_t> g_reserved;  // cuMemAddressReserve ranges: base -> size
thread_local int t_device = -1;           // current context's device

// Calls counted for tests (hawserFakeCudaCalls), and launches made to fail
// (hawserFakeCudaFailLaunch).
std::atomic<uint64_t> g_calls_memcpy_async{0}, g_calls_launch{0}, g_calls_batch{0}, g_calls_pointer{0};
std::atomic<long> g_fail_after{-1};  // launches to let through before the one that fails
std::atomic<int> g_fail_code{0};
std::atomic<bool> g_fail_async{false};
constexpr const char* kKernelEntry = "hawser_copy_pieces";
struct Module {
  bool has_kernel = false;
};
struct Function {
  int kind = 1;  // the copy kernel
};
Function g_copy_kernel;
std::list<Module> g_modules;
std::map<std::pair<int, int>, bool> g_peer_access;  // (from device, to device) enabled

Allocation* findAlloc(uint64_t p, uint64_t* base = nullptr) {
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.size) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool inSpace(uint64_t p) {
  auto s = reinterpret_cast<uint64_t>(g_space);
  return g_space && p >= s && p < s + kDeviceSpace;
}

// Host address of the first bytes of [p, p + n) and how many of them are
// contiguous there: device memory through its shadow (up to the end of its
// allocation or mapping), host memory as is. 0 when p is device space but
// not inside a live allocation.
size_t piece(uint64_t p, size_t n, char** host) {
  if (!inSpace(p)) {
    *host = reinterpret_cast<char*>(p);
    return n;
  }
  uint64_t base = 0;
  Allocation* a = findAlloc(p, &base);
  if (!a) return 0;
  *host = a->shadow + (p - base);
  return std::min<uint64_t>(n, base + a->size - p);
}

// Whether all of [p, p + n) is live: one allocation, or mappings back to
// back (a range of cuMemMap mappings is one range to the driver's copies).
bool rangeLive(uint64_t p, size_t n) {
  while (n > 0) {
    char* h = nullptr;
    size_t k = piece(p, n, &h);
    if (k == 0) return false;
    uint64_t base = 0;
    Allocation* a = inSpace(p) ? findAlloc(p, &base) : nullptr;
    if (k < n && !(a && a->mapped)) return false;  // a cuMemAlloc allocation ends there
    p += k;
    n -= k;
  }
  return true;
}

// hawserFakeCudaHoldStreams: while held, no stream runs an operation.
std::mutex g_hold_mu;
std::condition_variable g_hold_cv;
bool g_hold = false;
void waitUnheld() {
  std::unique_lock lk(g_hold_mu);
  g_hold_cv.wait(lk, [] { return !g_hold; });
}

// A stream: its own thread runs its operations in order. An operation
// that faults (returns an error) makes every later one report it.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<Result()>> ops;
  uint64_t queued = 0, done = 0;
  uint64_t failed_at = 0;  // the first faulting operation (0: none)
  Result error = kOk;
  bool stop = false;
  std::thread worker;
  Stream() {
    worker = std::thread([this] {
      std::unique_lock lk(mu);
      for (;;) {
        cv.wait(lk, [&] { return stop || !ops.empty(); });
        if (ops.empty()) return;
        auto op = std::move(ops.front());
        ops.pop_front();
        const bool faulted = error != kOk;
        lk.unlock();
        waitUnheld();
        const Result rc = faulted ? kOk : op();  // after a fault nothing runs any more
        lk.lock();
        ++done;
        if (rc != kOk && error == kOk) {
          error = rc;
          failed_at = done;
        }
        cv.notify_all();
      }
    });
  }
  ~Stream() {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  uint64_t push(std::function<Result()> op) {
    std::lock_guard lk(mu);
    ops.push_back(std::move(op));
    cv.notify_all();
    return ++queued;
  }
  void waitFor(uint64_t n) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done >= n; });
  }
  bool reached(uint64_t n) {
    std::lock_guard lk(mu);
    return done >= n;
  }
  // The error an event at mark n reports once reached.
  Result errorAt(uint64_t n) {
    std::lock_guard lk(mu);
    return error != kOk && n >= failed_at ? error : kOk;
  }
};

struct Event {
  Stream* stream = nullptr;
  uint64_t mark = 0;
};

Stream* g_null_stream = nullptr;
Stream* streamOf(void* s) {
  if (s) return static_cast<Stream*>(s);
  std::lock_guard lk(g_mu);
  if (!g_null_stream) g_null_stream = new Stream();
  return g_null_stream;
}

struct IpcHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t size;
};
constexpr uint32_t kIpcMagic = 0x48465743;  // "HFWC"

Result copyNow(uint64_t dst, uint64_t src, size_t n) {
  {
    std::lock_guard lk(g_mu);
    if (!rangeLive(dst, n) || !rangeLive(src, n)) return kInvalidValue;
  }
  while (n > 0) {
    char *d = nullptr, *s = nullptr;
    size_t k;
    {
      std::lock_guard lk(g_mu);
      k = std::min(piece(dst, n, &d), piece(src, n, &s));
    }
    if (k == 0) return kInvalidValue;
    std::memmove(d, s, k);
    dst += k;
    src += k;
    n -= k;
  }
  return kOk;
}

}  // namespace

extern "C" {

Result cuInit(unsigned) {
  std::lock_guard lk(g_mu);
  if (g_init) return kOk;
  const char* env = getenv("HAWSER_FAKE_CUDA_DEVICES");
  g_devices = env ? atoi(env) : 2;
  if (g_devices <= 0) return kNoDevice;
  void* space = mmap(nullptr, kDeviceSpace, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (space == MAP_FAILED) return kNotInitialized;
  g_space = static_cast<char*>(space);
  g_init = true;
  return kOk;
}

Result cuDeviceGetCount(int* n) {
  if (!g_init) return kNotInitialized;
  *n = g_devices;
  return kOk;
}
Result cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= g_devices) return kInvalidValue;
  *dev = ordinal;
  return kOk;
}
Result cuDeviceGetPCIBusId(char* bus, int len, int dev) {
  snprintf(bus, static_cast<size_t>(len), "0000:fa:%02x.0", dev);
  return kOk;
}
Result cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (dev < 0 || dev >= g_devices) return kInvalidValue;
  *ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(dev + 1));
  return kOk;
}
Result cuCtxSetCurrent(void* ctx) {
  t_device = ctx ? static_cast<int>(reinterpret_cast<uintptr_t>(ctx)) - 1 : -1;
  return kOk;
}

Result cuCtxGetCurrent(void** ctx) {
  *ctx = t_device < 0 ? nullptr : reinterpret_cast<void*>(static_cast<uintptr_t>(t_device + 1));
  return kOk;
}

Result cuPointerGetAttribute(void* out, int attr, DevicePtr p) {
  g_calls_pointer++;
  std::lock_guard lk(g_mu);
  if (Allocation* a = findAlloc(p)) {
    if (attr == 2) *static_cast<unsigned*>(out) = 2;                 // device
    else if (attr == 9) *static_cast<int*>(out) = a->device;         // ordinal
    else if (attr == 10) *static_cast<int*>(out) = a->mapped ? 0 : 1;  // legacy IPC capable
    else if (attr == 15) *static_cast<int*>(out) = a->mapped ? g_phys[a->handle].rdma : 1;  // GPUDirect RDMA
    else return kInvalidValue;
    return kOk;
  }
  auto it = g_host.upper_bound(p);
  if (it != g_host.begin() && p < std::prev(it)->first + std::prev(it)->second) {
    if (attr == 2) *static_cast<unsigned*>(out) = 1;  // host
    else if (attr == 9) *static_cast<int*>(out) = 0;
    else return kInvalidValue;
    return kOk;
  }
  return kInvalidValue;  // memory the driver does not know
}

// As the real driver, these need a current context (CUresult 201 without):
// an H200 run showed hawser calling them from threads that had none.
Result cuMemGetAddressRange_v2(DevicePtr* base, size_t* size, DevicePtr p) {
  if (t_device < 0) return kInvalidContext;
  std::lock_guard lk(g_mu);
  uint64_t b = 0;
  Allocation* a = findAlloc(p, &b);
  if (!a) return kInvalidValue;
  if (base) *base = b;
  if (size) *size = a->size;
  return kOk;
}

Result cuMemAlloc_v2(DevicePtr* p, size_t n) {
  std::lock_guard lk(g_mu);
  if (!g_init) return kNotInitialized;
  if (t_device < 0) return kInvalidContext;
  if (n == 0) return kInvalidValue;
  uint64_t size = (n + kAlign - 1) / kAlign * kAlign;
  if (g_next + size > kDeviceSpace) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  int fd = memfd_create("hawser-fake-cuda", MFD_CLOEXEC);
  if (fd < 0) return 2;
  void* shadow = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0)
    shadow = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shadow == MAP_FAILED) {
    close(fd);
    return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  }
  uint64_t off = g_next;
  g_next += size + kAlign;  // a guard page between allocations
  uint64_t addr = reinterpret_cast<uint64_t>(g_space) + off;
  g_allocs[addr] = Allocation{size, static_cast<char*>(shadow), fd, t_device, false};
  *p = addr;
  return kOk;
}

Result cuMemFree_v2(DevicePtr p) {
  std::lock_guard lk(g_mu);
  auto it = g_allocs.find(p);
  if (it == g_allocs.end() || it->second.opened || it->second.mapped) return kInvalidValue;
  munmap(it->second.shadow, it->second.size);
  close(it->second.fd);
  g_allocs.erase(it);
  return kOk;
}

// ---- virtual memory management

struct Location {
  int type, id;
};
struct AllocationProp {  // CUmemAllocationProp
  int type;
  int requestedHandleTypes;
  Location location;
  void* win32HandleMetaData;
  unsigned char compressionType;
  unsigned char gpuDirectRDMACapable;
  unsigned short usage;
  unsigned char reserved[4];
};
struct AccessDesc {
  Location location;
  int flags;
};

Result cuMemGetAllocationGranularity(size_t* g, const AllocationProp* prop, int) {
  if (!g || !prop || prop->location.type != 1) return kInvalidValue;
  *g = kGranularity;
  return kOk;
}

Result cuMemCreate(unsigned long long* handle, size_t size, const AllocationProp* prop, unsigned long long) {
  std::lock_guard lk(g_mu);
  if (!g_init) return kNotInitialized;
  if (!handle || !prop || prop->type != 1 || prop->location.type != 1 || prop->location.id < 0 ||
      prop->location.id >= g_devices || size == 0 || size % kGranularity != 0)
    return kInvalidValue;
  // The name carries the device (and the rdma flag), for an importer of the fd.
  char name[64];
  snprintf(name, sizeof name, "hawser-fake-cuda-vmm-%d-%d", prop->location.id, prop->gpuDirectRDMACapable ? 1 : 0);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return 2;
  void* shadow = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0)
    shadow = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shadow == MAP_FAILED) {
    close(fd);
    return 2;
  }
  const uint64_t h = g_next_handle++;
  g_phys[h] = Physical{size, static_cast<char*>(shadow), fd, prop->location.id, prop->gpuDirectRDMACapable != 0,
                       prop->requestedHandleTypes};
  *handle = h;
  return kOk;
}

static void dropPhysicalLocked(uint64_t h) {
  auto it = g_phys.find(h);
  if (it == g_phys.end() || it->second.refs > 0 || it->second.maps > 0) return;
  munmap(it->second.shadow, it->second.size);
  close(it->second.fd);
  g_phys.erase(it);
}

Result cuMemRelease(unsigned long long handle) {
  std::lock_guard lk(g_mu);
  auto it = g_phys.find(handle);
  if (it == g_phys.end() || it->second.refs <= 0) return kInvalidValue;
  it->second.refs--;  // the mappings keep it alive
  dropPhysicalLocked(handle);
  return kOk;
}

Result cuMemAddressReserve(DevicePtr* ptr, size_t size, size_t, DevicePtr, unsigned long long) {
  std::lock_guard lk(g_mu);
  if (!g_init) return kNotInitialized;
  if (!ptr || size == 0 || size % kGranularity != 0) return kInvalidValue;
  uint64_t off = (g_next + kGranularity - 1) / kGranularity * kGranularity;
  if (off + size > kDeviceSpace) return 2;
  g_next = off + size + kGranularity;  // a gap after each reservation
  uint64_t addr = reinterpret_cast<uint64_t>(g_space) + off;
  g_reserved[addr] = size;
  *ptr = addr;
  return kOk;
}

Result cuMemAddressFree(DevicePtr ptr, size_t size) {
  std::lock_guard lk(g_mu);
  auto it = g_reserved.find(ptr);
  if (it == g_reserved.end() || it->second != size) return kInvalidValue;
  auto a = g_allocs.lower_bound(ptr);
  if (a != g_allocs.end() && a->first < ptr + size) return kInvalidValue;  // still mapped
  g_reserved.erase(it);
  return kOk;
}

Result cuMemMap(DevicePtr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long) {
  std::lock_guard lk(g_mu);
  auto ph = g_phys.find(handle);
  if (ph == g_phys.end() || size == 0 || ptr % kGranularity || size % kGranularity || offset % kGranularity ||
      offset + size > ph->second.size)
    return kInvalidValue;
  auto r = g_reserved.upper_bound(ptr);
  if (r == g_reserved.begin() || ptr + size > std::prev(r)->first + std::prev(r)->second) return kInvalidValue;
  auto next = g_allocs.lower_bound(ptr);
  if (next != g_allocs.end() && next->first < ptr + size) return kInvalidValue;  // already mapped
  if (findAlloc(ptr)) return kInvalidValue;
  Allocation a{size, ph->second.shadow + offset, -1, ph->second.device, false};
  a.mapped = true;
  a.handle = handle;
  g_allocs[ptr] = a;
  ph->second.maps++;
  return kOk;
}

Result cuMemSetAccess(DevicePtr ptr, size_t size, const AccessDesc* desc, size_t count) {
  std::lock_guard lk(g_mu);
  if (!desc || count == 0) return kInvalidValue;
  for (uint64_t p = ptr; p < ptr + size;) {
    uint64_t base = 0;
    Allocation* a = findAlloc(p, &base);
    if (!a || !a->mapped) return kInvalidValue;  // only mapped ranges
    p = base + a->size;
  }
  return kOk;
}

Result cuMemUnmap(DevicePtr ptr, size_t size) {
  std::lock_guard lk(g_mu);
  std::vector<uint64_t> gone;
  for (auto it = g_allocs.lower_bound(ptr); it != g_allocs.end() && it->first < ptr + size; ++it) {
    if (!it->second.mapped || it->first + it->second.size > ptr + size) return kInvalidValue;
    gone.push_back(it->first);
  }
  for (uint64_t p : gone) {
    uint64_t h = g_allocs[p].handle;
    g_allocs.erase(p);
    g_phys[h].maps--;
    dropPhysicalLocked(h);
  }
  return kOk;
}

// The allocation mapped at `addr` (one more reference to it).
Result cuMemRetainAllocationHandle(unsigned long long* handle, void* addr) {
  std::lock_guard lk(g_mu);
  Allocation* a = findAlloc(reinterpret_cast<uint64_t>(addr));
  if (!handle || !a || !a->mapped) return kInvalidValue;
  auto ph = g_phys.find(a->handle);
  if (ph == g_phys.end()) return kInvalidValue;
  ph->second.refs++;
  *handle = a->handle;
  return kOk;
}

Result cuMemGetAllocationPropertiesFromHandle(AllocationProp* prop, unsigned long long handle) {
  std::lock_guard lk(g_mu);
  auto ph = g_phys.find(handle);
  if (!prop || ph == g_phys.end()) return kInvalidValue;
  *prop = AllocationProp{};
  prop->type = 1;
  prop->requestedHandleTypes = ph->second.handle_types;
  prop->location = {1, ph->second.device};
  prop->gpuDirectRDMACapable = ph->second.rdma ? 1 : 0;
  return kOk;
}

// A POSIX fd of the allocation: a duplicate of its memfd (another process
// that receives it maps the same bytes).
Result cuMemExportToShareableHandle(void* out, unsigned long long handle, int type, unsigned long long flags) {
  std::lock_guard lk(g_mu);
  auto ph = g_phys.find(handle);
  if (!out || ph == g_phys.end() || flags != 0) return kInvalidValue;
  if (type != 1 || (ph->second.handle_types & 1) == 0) return kNotSupported;  // not requested at cuMemCreate
  int fd = fcntl(ph->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return kInvalidValue;
  *static_cast<int*>(out) = fd;
  return kOk;
}

// A new handle of the allocation behind a POSIX fd (the fd stays the caller's).
Result cuMemImportFromShareableHandle(unsigned long long* handle, void* os_handle, int type) {
  if (!handle || type != 1) return kInvalidValue;
  const int src = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  char path[64], link[256] = {0};
  snprintf(path, sizeof path, "/proc/self/fd/%d", src);
  int device = -1, rdma = 0;
  if (readlink(path, link, sizeof link - 1) < 0 ||
      sscanf(link, "/memfd:hawser-fake-cuda-vmm-%d-%d", &device, &rdma) != 2)
    return kInvalidValue;  // not an allocation's fd
  struct stat st {};
  if (fstat(src, &st) != 0 || st.st_size <= 0) return kInvalidValue;
  const off_t size = st.st_size;
  int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return kInvalidValue;
  void* shadow = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shadow == MAP_FAILED) {
    close(fd);
    return kInvalidValue;
  }
  std::lock_guard lk(g_mu);
  const uint64_t h = g_next_handle++;
  Physical ph{static_cast<uint64_t>(size), static_cast<char*>(shadow), fd, device, rdma != 0, 1};
  ph.imported = true;
  g_phys[h] = ph;
  *handle = h;
  return kOk;
}

Result cuMemHostAlloc(void** p, size_t n, unsigned) {
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  std::lock_guard lk(g_mu);
  g_host[reinterpret_cast<uint64_t>(m)] = n;
  *p = m;
  return kOk;
}
Result cuMemFreeHost(void* p) {
  std::lock_guard lk(g_mu);
  auto it = g_host.find(reinterpret_cast<uint64_t>(p));
  if (it == g_host.end()) return kInvalidValue;
  munmap(p, it->second);
  g_host.erase(it);
  return kOk;
}
Result cuMemHostRegister_v2(void* p, size_t n, unsigned) {
  if (t_device < 0) return kInvalidContext;
  std::lock_guard lk(g_mu);
  auto a = reinterpret_cast<uint64_t>(p);
  if (g_host.count(a)) return kAlreadyRegistered;
  g_host[a] = n;
  return kOk;
}
Result cuMemHostUnregister(void* p) {
  if (t_device < 0) return kInvalidContext;
  std::lock_guard lk(g_mu);
  if (!g_host.erase(reinterpret_cast<uint64_t>(p))) return kNotRegistered;
  return kOk;
}

// A staged copy (below) lands once someone waits for the legacy stream,
// or 2 ms after it was made at the latest, as a GPU's DMA may.
static std::mutex g_land_mu;
static std::condition_variable g_land_cv;
static uint64_t g_land_waits = 0;  // waits for the legacy stream begun so far
static void waitForLegacy(Stream* legacy, uint64_t mark) {
  {
    std::lock_guard lk(g_land_mu);
    ++g_land_waits;
  }
  g_land_cv.notify_all();
  legacy->waitFor(mark);
}

// cuMemcpy as the driver API documents it ("API synchronization
// behavior"): the legacy stream's earlier work first; from pageable host
// memory to device memory it returns once the bytes are staged, and the
// copy into device memory lands later, on the legacy stream, so that code
// which reads them from another stream before synchronizing sees the old
// bytes, as it may on a GPU.
Result cuMemcpy(DevicePtr dst, DevicePtr src, size_t n) {
  Stream* legacy = streamOf(nullptr);
  uint64_t before;
  {
    std::lock_guard lk(legacy->mu);
    before = legacy->queued;
  }
  waitForLegacy(legacy, before);
  bool staged;
  {
    std::lock_guard lk(g_mu);
    if (!rangeLive(dst, n) || !rangeLive(src, n)) return kInvalidValue;
    auto it = g_host.upper_bound(src);
    const bool pinned = it != g_host.begin() && src + n <= std::prev(it)->first + std::prev(it)->second;
    staged = inSpace(dst) && !inSpace(src) && !pinned;
  }
  if (!staged) return copyNow(dst, src, n);
  auto staging = std::make_shared<std::vector<char>>(reinterpret_cast<const char*>(src),
                                                     reinterpret_cast<const char*>(src) + n);
  uint64_t waits;
  {
    std::lock_guard lk(g_land_mu);
    waits = g_land_waits;
  }
  legacy->push([dst, staging, waits]() -> Result {
    std::unique_lock lk(g_land_mu);
    g_land_cv.wait_for(lk, std::chrono::milliseconds(2), [waits] { return g_land_waits != waits; });
    lk.unlock();
    return copyNow(dst, reinterpret_cast<uint64_t>(staging->data()), staging->size());
  });
  return kOk;
}

Result cuMemcpyAsync(DevicePtr dst, DevicePtr src, size_t n, void* stream) {
  {
    std::lock_guard lk(g_mu);
    if (!rangeLive(dst, n) || !rangeLive(src, n)) return kInvalidValue;
  }
  streamOf(stream)->push([=] {
    (void)copyNow(dst, src, n);  // checked above; memory freed since is the caller's race
    return kOk;
  });
  g_calls_memcpy_async.fetch_add(1);
  return kOk;
}
Result cuMemcpyPeerAsync(DevicePtr dst, void*, DevicePtr src, void*, size_t n, void* stream) {
  return cuMemcpyAsync(dst, src, n, stream);
}
Result cuMemsetD8_v2(DevicePtr p, unsigned char v, size_t n) {
  std::lock_guard lk(g_mu);
  if (!rangeLive(p, n)) return kInvalidValue;
  while (n > 0) {
    char* d = nullptr;
    size_t k = piece(p, n, &d);
    std::memset(d, v, k);
    p += k;
    n -= k;
  }
  return kOk;
}

Result cuStreamCreate(void** s, unsigned) {
  *s = new Stream();
  return kOk;
}
Result cuStreamDestroy_v2(void* s) {
  delete static_cast<Stream*>(s);
  return kOk;
}
Result cuStreamSynchronize(void* s) {
  Stream* st = streamOf(s);
  uint64_t n;
  {
    std::lock_guard lk(st->mu);
    n = st->queued;
  }
  if (s) st->waitFor(n);
  else waitForLegacy(st, n);
  return st->errorAt(n);
}
Result cuEventCreate(void** e, unsigned) {
  *e = new Event();
  return kOk;
}
Result cuEventDestroy_v2(void* e) {
  delete static_cast<Event*>(e);
  return kOk;
}
Result cuEventRecord(void* e, void* s) {
  auto* ev = static_cast<Event*>(e);
  ev->stream = streamOf(s);
  ev->mark = ev->stream->push([] { return kOk; });
  return kOk;
}
Result cuEventQuery(void* e) {
  auto* ev = static_cast<Event*>(e);
  if (!ev->stream) return kOk;
  return ev->stream->reached(ev->mark) ? ev->stream->errorAt(ev->mark) : kNotReady;
}
Result cuEventSynchronize(void* e) {
  auto* ev = static_cast<Event*>(e);
  if (!ev->stream) return kOk;
  ev->stream->waitFor(ev->mark);
  return ev->stream->errorAt(ev->mark);
}

Result cuIpcGetMemHandle(void* handle, DevicePtr p) {
  std::lock_guard lk(g_mu);
  uint64_t base = 0;
  Allocation* a = findAlloc(p, &base);
  if (!a || a->opened || a->mapped) return kInvalidValue;  // mapped memory is not legacy-IPC capable
  IpcHandle h{kIpcMagic, static_cast<int32_t>(getpid()), a->fd, a->device, a->size};
  std::memset(handle, 0, 64);
  std::memcpy(handle, &h, sizeof(h));
  return kOk;
}

struct IpcArg {
  char data[64];
};
Result cuIpcOpenMemHandle_v2(DevicePtr* p, IpcArg handle, unsigned) {
  IpcHandle h;
  std::memcpy(&h, handle.data, sizeof(h));
  if (h.magic != kIpcMagic) return kInvalidValue;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return kInvalidValue;  // the owner is gone
  void* m = mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return kInvalidValue;
  std::lock_guard lk(g_mu);
  uint64_t off = g_next;
  g_next += h.size + kAlign;
  uint64_t addr = reinterpret_cast<uint64_t>(g_space) + off;
  g_allocs[addr] = Allocation{h.size, static_cast<char*>(m), -1, h.device, true};
  *p = addr;
  return kOk;
}
Result cuIpcCloseMemHandle(DevicePtr p) {
  std::lock_guard lk(g_mu);
  auto it = g_allocs.find(p);
  if (it == g_allocs.end() || !it->second.opened) return kInvalidValue;
  munmap(it->second.shadow, it->second.size);
  g_allocs.erase(it);
  return kOk;
}

Result cuGetErrorString(Result rc, const char** text) {
  static thread_local char buf[64];
  snprintf(buf, sizeof(buf), "fake CUDA error %d", rc);
  *text = buf;
  return kOk;
}

// A dma-buf of [p, p + n): a duplicate of the allocation's memfd, whose
// offset 0 is the allocation's start (p must be that start, as hawser asks).
// A dma-buf of a fully mapped range [p, p + n) of cuMemMap mappings, all on
// one device: see the top of this file.
static Result exportMappedLocked(int* out, DevicePtr p, size_t n) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (p % page || n % page || n == 0) return kInvalidValue;
  struct Piece {
    char* shadow;
    uint64_t at, len;
  };
  std::vector<Piece> pieces;
  int device = -1;
  for (uint64_t q = p; q < p + n;) {
    uint64_t base = 0;
    Allocation* a = findAlloc(q, &base);
    if (!a || !a->mapped) return kInvalidValue;  // a gap, or not mapped memory
    if (device >= 0 && a->device != device) return kInvalidValue;
    device = a->device;
    const uint64_t len = std::min<uint64_t>(base + a->size, p + n) - q;
    pieces.push_back(Piece{a->shadow + (q - base), q - p, len});
    q += len;
  }
  int fd = memfd_create("hawser-fake-cuda-dmabuf", MFD_CLOEXEC);
  if (fd < 0) return kInvalidValue;
  void* view = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(n)) == 0) view = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) {
    close(fd);
    return kInvalidValue;
  }
  for (const Piece& pc : pieces) {
    std::memcpy(static_cast<char*>(view) + pc.at, pc.shadow, pc.len);
    // The allocation's pages now live in the dma-buf: both see one copy.
    if (mmap(pc.shadow, pc.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(pc.at)) ==
        MAP_FAILED)
      std::abort();  // the shadow is gone: nothing sane is left to simulate
  }
  munmap(view, n);
  *out = fd;
  return kOk;
}

Result cuMemGetHandleForAddressRange(void* handle, DevicePtr p, size_t n, int type, unsigned long long) {
  if (type != 1) return kNotSupported;
  if (t_device < 0) return kInvalidContext;
  std::lock_guard lk(g_mu);
  uint64_t base = 0;
  Allocation* a = findAlloc(p, &base);
  if (a && a->mapped) return exportMappedLocked(static_cast<int*>(handle), p, n);
  // A dma-buf of a cuMemAlloc allocation: a duplicate of its memfd, whose
  // offset 0 is the allocation's start (p must be that start, as hawser asks).
  auto it = g_allocs.find(p);
  if (it == g_allocs.end() || it->second.opened || n < it->second.size) return kInvalidValue;
  int fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return kInvalidValue;
  *static_cast<int*>(handle) = fd;
  return kOk;
}

Result cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev >= g_devices) return kInvalidValue;
  if (attr != 16) return kInvalidValue;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  *v = 132;
  return kOk;
}

Result cuCtxEnablePeerAccess(void* ctx, unsigned) {
  if (t_device < 0) return kInvalidContext;
  const int to = ctx ? static_cast<int>(reinterpret_cast<uintptr_t>(ctx)) - 1 : -1;
  if (to < 0 || to >= g_devices || to == t_device) return kInvalidValue;
  std::lock_guard lk(g_mu);
  bool& on = g_peer_access[{t_device, to}];
  if (on) return kPeerAccessAlreadyEnabled;
  on = true;
  return kOk;
}

// PTX that declares the copy kernel's entry loads; anything else is refused
// as the real driver refuses PTX it cannot compile.
Result cuModuleLoadData(void** mod, const void* image) {
  if (t_device < 0) return kInvalidContext;
  const char* text = static_cast<const char*>(image);
  if (!text || !strstr(text, ".version ") || !strstr(text, ".target ")) return kInvalidPtx;
  // Modules live in a list of the library's (a process keeps its modules
  // loaded, as hawser does: not a leak).
  std::lock_guard lk(g_mu);
  g_modules.emplace_back();
  g_modules.back().has_kernel = strstr(text, ".entry hawser_copy_pieces(") != nullptr;
  *mod = &g_modules.back();
  return kOk;
}
Result cuModuleUnload(void* mod) {
  std::lock_guard lk(g_mu);
  for (auto it = g_modules.begin(); it != g_modules.end(); ++it)
    if (&*it == mod) {
      g_modules.erase(it);
      return kOk;
    }
  return kInvalidHandle;
}
Result cuModuleGetFunction(void** fn, void* mod, const char* name) {
  auto* m = static_cast<Module*>(mod);
  if (!m) return kInvalidHandle;
  if (!m->has_kernel || strcmp(name, kKernelEntry) != 0) return kNotFound;
  *fn = &g_copy_kernel;
  return kOk;
}

// What hawser_copy_pieces does, on the stream: params are the piece list's
// device address and the count; each piece {dst, src, len} is copied. A
// piece outside live memory faults the stream.
Result cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shared, void* stream, void** params, void** extra) {
  if (t_device < 0) return kInvalidContext;
  if (fn != &g_copy_kernel || !params || extra) return kInvalidValue;
  if (gx == 0 || gy != 1 || gz != 1 || gx > 65535 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || bx % 32 ||
      shared != 0)
    return kInvalidValue;
  const DevicePtr list = *static_cast<DevicePtr*>(params[0]);
  const unsigned long long count = *static_cast<unsigned long long*>(params[1]);
  g_calls_launch.fetch_add(1);
  bool fault = false;
  if (long left = g_fail_after.load(); left >= 0) {
    if (left == 0) {
      g_fail_after.store(-1);
      if (!g_fail_async.load()) return g_fail_code.load();
      fault = true;
    } else {
      g_fail_after.store(left - 1);
    }
  }
  {
    std::lock_guard lk(g_mu);
    if (!rangeLive(list, count * 24)) return kInvalidValue;
  }
  streamOf(stream)->push([=]() -> Result {
    if (fault) return g_fail_code.load();
    std::vector<uint64_t> pieces(count * 3);
    if (copyNow(reinterpret_cast<uint64_t>(pieces.data()), list, count * 24) != kOk) return kIllegalAddress;
    for (unsigned long long i = 0; i < count; ++i) {
      const uint64_t dst = pieces[3 * i], src = pieces[3 * i + 1], len = pieces[3 * i + 2];
      if (len == 0) continue;
      if (copyNow(dst, src, len) != kOk) return kIllegalAddress;
    }
    return kOk;
  });
  return kOk;
}

struct MemcpyAttr {
  int srcAccessOrder;
  int srcLoc[2];
  int dstLoc[2];
  unsigned flags;
};

Result cuMemcpyBatchAsync_v2(DevicePtr* dsts, DevicePtr* srcs, size_t* sizes, size_t count, MemcpyAttr* attrs,
                             size_t* attr_idx, size_t nattrs, void* stream) {
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attr_idx || nattrs == 0 || nattrs > count ||
      attr_idx[0] != 0)
    return kInvalidValue;
  for (size_t a = 0; a < nattrs; ++a)
    if (attrs[a].srcAccessOrder < 1 || attrs[a].srcAccessOrder > 3) return kInvalidValue;
  std::vector<uint64_t> d(dsts, dsts + count), s(srcs, srcs + count), n(sizes, sizes + count);
  {
    std::lock_guard lk(g_mu);
    for (size_t i = 0; i < count; ++i)
      if (!rangeLive(d[i], n[i]) || !rangeLive(s[i], n[i])) return kInvalidValue;
  }
  g_calls_batch.fetch_add(1);
  streamOf(stream)->push([d = std::move(d), s = std::move(s), n = std::move(n)]() -> Result {
    for (size_t i = 0; i < d.size(); ++i)
      if (copyNow(d[i], s[i], n[i]) != kOk) return kIllegalAddress;
    return kOk;
  });
  return kOk;
}

// Test hooks (not CUDA): calls made so far of "launch" (cuLaunchKernel),
// "batch" (cuMemcpyBatchAsync_v2), "memcpy_async" (cuMemcpyAsync) or
// "pointer" (cuPointerGetAttribute); -1 for another name.
long long hawserFakeCudaCalls(const char* what) {
  if (!strcmp(what, "launch")) return static_cast<long long>(g_calls_launch.load());
  if (!strcmp(what, "batch")) return static_cast<long long>(g_calls_batch.load());
  if (!strcmp(what, "memcpy_async")) return static_cast<long long>(g_calls_memcpy_async.load());
  if (!strcmp(what, "pointer")) return static_cast<long long>(g_calls_pointer.load());
  return -1;
}

// Test hook: after `after` more launches of the copy kernel, the next one
// fails with `code`: at the call (async 0), or on the stream as a fault
// that its events then report (async 1). after < 0: no failure.
void hawserFakeCudaFailLaunch(long after, int code, int async) {
  g_fail_code.store(code);
  g_fail_async.store(async != 0);
  g_fail_after.store(after);
}

// Test hook: while `hold` is true no stream runs anything queued on it
// (copies, launches, events stay pending), as a busy GPU would.
void hawserFakeCudaHoldStreams(int hold) {
  {
    std::lock_guard lk(g_hold_mu);
    g_hold = hold != 0;
  }
  g_hold_cv.notify_all();
}

// Test hooks (not CUDA): how many IPC mappings this process has open:
// legacy IPC handles opened, and allocations imported from another
// process's fd that are still held (by a handle or a mapping).
int hawserFakeCudaOpenedHandles() {
  std::lock_guard lk(g_mu);
  int n = 0;
  for (auto& [a, al] : g_allocs) n += al.opened ? 1 : 0;
  for (auto& [h, ph] : g_phys) n += ph.imported ? 1 : 0;
  return n;
}

// Test hook: address ranges reserved (cuMemAddressReserve) and not freed.
int hawserFakeCudaReservations() {
  std::lock_guard lk(g_mu);
  return static_cast<int>(g_reserved.size());
}

}  // extern "C"
