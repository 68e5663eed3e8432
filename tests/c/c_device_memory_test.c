/* The C API's GPU memory functions from C (C11, -Wpedantic -Werror),
 * against the stand-in CUDA driver (tests/gpu/sim, its path compiled in as
 * HAWSER_FAKE_CUDA): without a driver every call says so; with it, device
 * memory allocated, filled and read back through copies, the stream
 * synchronized, freed. The driver is loaded once per process: the cases run
 * in this order.
 *
 * Usage: c_c_device_memory_test [case]   (no argument: every case)
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

static int before_a_driver_is_loaded_every_call_is_not_supported(void) {
  void* p = NULL;
  char host[16] = {0};
  CHECK(hawser_cuda_device_count() == 0);
  CHECK_RC(hawser_allocate_device_memory(0, 4096, &p), HAWSER_E_NOT_SUPPORTED);
  CHECK_ERROR_NAMES("no CUDA driver loaded");
  CHECK_RC(hawser_copy_memory(host, host + 8, 8), HAWSER_E_NOT_SUPPORTED);
  CHECK_RC(hawser_synchronize_stream(NULL), HAWSER_E_NOT_SUPPORTED);
  CHECK_RC(hawser_free_device_memory(host), HAWSER_E_NOT_SUPPORTED);
  return 0;
}

static int device_memory_round_trips_through_copies(void) {
  CHECK_OK(hawser_load_cuda_driver(HAWSER_FAKE_CUDA));
  CHECK(hawser_cuda_device_count() >= 1);
  const size_t n = (size_t)1 << 20;
  void* dev = NULL;
  CHECK_OK(hawser_allocate_device_memory(0, n, &dev));
  CHECK(dev != NULL);
  unsigned char* in = malloc(n);
  unsigned char* out = calloc(n, 1);
  CHECK(in != NULL && out != NULL);
  for (size_t i = 0; i < n; ++i) in[i] = (unsigned char)(i * 131u + (i >> 12));
  CHECK_OK(hawser_copy_memory(dev, in, n));
  CHECK_OK(hawser_synchronize_stream(NULL));
  CHECK_OK(hawser_copy_memory(out, dev, n));
  CHECK(memcmp(in, out, n) == 0);
  CHECK_RC(hawser_free_device_memory(in), HAWSER_E_INVALID_ARGUMENT); /* host memory */
  CHECK_ERROR_NAMES("not device memory");
  CHECK_OK(hawser_free_device_memory(dev));
  CHECK_RC(hawser_allocate_device_memory(hawser_cuda_device_count(), 4096, &dev), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("does not exist");
  CHECK_RC(hawser_allocate_device_memory(0, 4096, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_copy_memory(NULL, in, 8), HAWSER_E_INVALID_ARGUMENT);
  free(in);
  free(out);
  return 0;
}

static const struct c_case cases[] = {
    {"before_a_driver_is_loaded_every_call_is_not_supported", before_a_driver_is_loaded_every_call_is_not_supported},
    {"device_memory_round_trips_through_copies", device_memory_round_trips_through_copies},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
