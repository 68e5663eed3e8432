// bench/kv_gpu_baseline's gather/scatter kernel: what the GPU itself does
// with a list of scattered copies. Compiled to PTX at build time (nvcc
// -ptx), embedded in kv_gpu_baseline and loaded with cuModuleLoadData.
//
// One run per CTA at a time: CTA b copies runs b, b + gridDim.x, ... So a
// grid of as many CTAs as runs is "one CTA per chunk, the whole GPU", and a
// smaller grid bounds the SMs the copy takes. 16-byte loads and stores when
// both ends and the length are 16-byte aligned (four in flight per thread),
// bytes otherwise: exact for any alignment and length.
struct KvCopyRun {
  unsigned long long dst;
  unsigned long long src;
  unsigned long long len;
};

extern "C" __global__ void kv_copy_runs(const KvCopyRun* __restrict__ runs, unsigned n) {
  for (unsigned r = blockIdx.x; r < n; r += gridDim.x) {
    const KvCopyRun run = runs[r];
    const unsigned long long step = blockDim.x;
    unsigned long long i = threadIdx.x;
    if (((run.dst | run.src | run.len) & 15) == 0) {
      const uint4* __restrict__ s = reinterpret_cast<const uint4*>(run.src);
      uint4* __restrict__ d = reinterpret_cast<uint4*>(run.dst);
      const unsigned long long n16 = run.len >> 4;
      for (; i + 3 * step < n16; i += 4 * step) {
        const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a;
        d[i + step] = b;
        d[i + 2 * step] = c;
        d[i + 3 * step] = e;
      }
      for (; i < n16; i += step) d[i] = s[i];
    } else {
      const unsigned char* s = reinterpret_cast<const unsigned char*>(run.src);
      unsigned char* d = reinterpret_cast<unsigned char*>(run.dst);
      for (; i < run.len; i += step) d[i] = s[i];
    }
  }
}
