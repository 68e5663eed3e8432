// The C API (hawser/c_api.h): host memory peers can map and GPU memory
// through the loaded CUDA driver (hawser/host_memory.h,
// hawser/device_memory.h), for C tools, tests and examples.
#include <string>

#include "engine/c_api_util.h"
#include "hawser/device_memory.h"
#include "hawser/host_memory.h"

namespace {

using namespace hawser::capi;

}  // namespace

extern "C" {

int hawser_allocate_host_memory(size_t bytes, void** out) {
  return guarded([&] {
    if (!out) return nullArg("out");
    return ret(hawser::allocateHostMemory(bytes, out));
  });
}

int hawser_free_host_memory(void* ptr) {
  return guarded([&] { return ret(hawser::freeHostMemory(ptr)); });
}

int hawser_load_cuda_driver(const char* path) {
  return guarded([&] { return ret(hawser::loadCudaDriver(path ? path : "")); });
}

int hawser_cuda_device_count(void) {
  int n = 0;
  (void)guarded([&] {
    n = hawser::cudaDeviceCount();
    return 0;
  });
  return n;
}

int hawser_allocate_device_memory(int device, size_t bytes, void** out) {
  return guarded([&] {
    if (!out) return nullArg("out");
    return ret(hawser::allocateDeviceMemory(device, bytes, out));
  });
}

int hawser_free_device_memory(void* ptr) {
  return guarded([&] { return ret(hawser::freeDeviceMemory(ptr)); });
}

int hawser_copy_memory(void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    if (!dst) return nullArg("dst");
    if (!src) return nullArg("src");
    return ret(hawser::copyMemory(dst, src, bytes));
  });
}

int hawser_synchronize_stream(void* stream) {
  return guarded([&] { return ret(hawser::synchronizeStream(stream)); });
}

}  // extern "C"
