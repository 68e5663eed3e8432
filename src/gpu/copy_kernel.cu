// hawser's gather/scatter copy kernel: one launch copies a window of runs.
//
// This file is the source of src/gpu/copy_kernel.ptx, which the library
// embeds and loads at run time through the driver (cuModuleLoadData): hawser
// needs no CUDA toolkit where it runs, only this PTX, which the driver
// compiles for its GPU. Regenerate the PTX after a change here with
//   scripts/gen_copy_kernel.sh
// (nvcc; the ctest test gpu.copy_kernel_ptx checks that the two agree where
// nvcc is installed).
//
// The launch: `pieces` points to device memory holding `count` pieces
// {dst, src, len} (gpu/batch_copy.h's CopyRun; the host cut runs into pieces
// of at most kPieceBytes). Each warp copies whole pieces, the warps of the
// grid taking them in turn (warp w: pieces w, w + warps, ...), so any number
// of CTAs (the launch's grid, bounded by gpu.copy_max_ctas) covers any
// number of pieces. Within a piece the warp moves the widest word both
// addresses allow: 16 bytes when dst and src agree modulo 16 (after a short
// head of single bytes), else 8, 4 or 1; eight words per lane in flight.
// Exact for any length and alignment.

struct Piece {
  unsigned long long dst;
  unsigned long long src;
  unsigned long long len;
};

namespace {

constexpr int kUnroll = 8;

template <class Word>
__device__ __forceinline__ void copyWords(char* dst, const char* src, unsigned long long len, unsigned lane) {
  constexpr unsigned long long W = sizeof(Word);
  // Bytes up to dst's first W-aligned address (src is then aligned too).
  unsigned long long head = (W - (reinterpret_cast<unsigned long long>(dst) & (W - 1))) & (W - 1);
  if (head > len) head = len;
  if (lane < head) dst[lane] = src[lane];
  dst += head;
  src += head;
  len -= head;
  const unsigned long long n = len / W;
  Word* d = reinterpret_cast<Word*>(dst);
  const Word* s = reinterpret_cast<const Word*>(src);
  unsigned long long i = lane;
  // Eight loads in flight per lane, then eight stores.
  for (; i + (kUnroll - 1) * 32 < n; i += kUnroll * 32) {
    Word v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = s[i + k * 32];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) d[i + k * 32] = v[k];
  }
  for (; i < n; i += 32) d[i] = s[i];
  // The last bytes (fewer than W).
  const unsigned long long done = n * W;
  if (done + lane < len) dst[done + lane] = src[done + lane];
}

__device__ __forceinline__ void copyPiece(const Piece& p, unsigned lane) {
  char* dst = reinterpret_cast<char*>(p.dst);
  const char* src = reinterpret_cast<const char*>(p.src);
  const unsigned long long skew = p.dst ^ p.src;
  if ((skew & 15) == 0) {
    copyWords<uint4>(dst, src, p.len, lane);
  } else if ((skew & 7) == 0) {
    copyWords<unsigned long long>(dst, src, p.len, lane);
  } else if ((skew & 3) == 0) {
    copyWords<unsigned>(dst, src, p.len, lane);
  } else {
    for (unsigned long long i = lane; i < p.len; i += 32) dst[i] = src[i];
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) hawser_copy_pieces(const Piece* __restrict__ pieces, unsigned long long count) {
  const unsigned lane = threadIdx.x & 31;
  const unsigned long long warps = (static_cast<unsigned long long>(gridDim.x) * blockDim.x) >> 5;
  unsigned long long w = (static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  for (; w < count; w += warps) {
    const Piece p = pieces[w];
    copyPiece(p, lane);
  }
}
