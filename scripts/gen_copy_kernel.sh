#!/usr/bin/env bash
# Regenerates src/gpu/copy_kernel.ptx from src/gpu/copy_kernel.cu with nvcc.
# The PTX is committed: hawser builds and runs without a CUDA toolkit, and the
# driver compiles the PTX for its GPU when it loads it. The ISA version is
# lowered to 7.0 (CUDA 11.0): the kernel uses nothing newer, so drivers from
# R450 on load it. Usage: scripts/gen_copy_kernel.sh [OUT] (default: the
# committed file); NVCC names the compiler (default: nvcc on PATH, else
# /usr/local/cuda/bin/nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-src/gpu/copy_kernel.ptx}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$nvcc" -ptx -arch=compute_75 -O3 -o "$tmp" src/gpu/copy_kernel.cu
# Keep the text that does not depend on the toolkit's build: drop nvcc's
# banner, lower the ISA version.
sed -e '/^\/\/ Compiler Build ID/d' -e '/^\/\/ Cuda compilation tools/d' -e '/^\/\/ Based on NVVM/d' \
    -e 's/^\.version [0-9.]*$/.version 7.0/' "$tmp" > "$out"
grep -q '^\.visible \.entry hawser_copy_pieces(' "$out" || { echo "gen_copy_kernel: no hawser_copy_pieces entry in $out" >&2; exit 1; }
