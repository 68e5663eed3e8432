/* A C program built with `pkg-config --cflags --libs hawser` against an
 * installed hawser: writes 64 KiB into its own segment, reads it back. */
#include <hawser/c_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  hawser_engine_t* e = NULL;
  if (hawser_engine_create("p2p", "pkgconfig-consumer", "127.0.0.1", 0, &e) != 0)
    return printf("create: %s\n", hawser_last_error()), 1;
  enum { N = 65536 };
  char* target = calloc(1, N);
  char* src = malloc(N);
  char* dst = calloc(1, N);
  for (int i = 0; i < N; ++i) src[i] = (char)(i * 31 + 7);
  char* bufs[] = {target, src, dst};
  for (int i = 0; i < 3; ++i)
    if (hawser_register_memory(e, bufs[i], N, NULL, 1) != 0) return printf("register: %s\n", hawser_last_error()), 1;
  char name[128];
  hawser_segment_id_t seg = 0;
  if (hawser_segment_name(e, name, sizeof name) < 0 || hawser_open_segment(e, name, &seg) != 0)
    return printf("open: %s\n", hawser_last_error()), 1;
  hawser_request_t w = {0}, r = {0};
  w.opcode = HAWSER_OP_WRITE, w.source = src, w.target_id = seg, w.target_offset = (uint64_t)(uintptr_t)target, w.length = N;
  r.opcode = HAWSER_OP_READ, r.source = dst, r.target_id = seg, r.target_offset = (uint64_t)(uintptr_t)target, r.length = N;
  if (hawser_transfer_sync(e, &w, 1, 10000, NULL) != 0 || hawser_transfer_sync(e, &r, 1, 10000, NULL) != 0)
    return printf("transfer: %s\n", hawser_last_error()), 1;
  if (memcmp(src, dst, N) != 0) return printf("bytes differ\n"), 1;
  hawser_engine_destroy(e);
  free(target), free(src), free(dst);
  printf("pkgconfig consumer: 64 KiB round trip verified\n");
  return 0;
}
