// `hawser bench --layout kv`: a paged KV cache the way an inference engine
// (vLLM) keeps it, moved as one block request against the same bytes
// contiguous, in one run.
//
// Each side holds, for every layer, a K and a V tensor of `kv_pool` blocks
// of `block_size` bytes (a pool: 2 x layers x kv_pool blocks). A request
// owns `kv_blocks` of them on each side, found through a block table: each
// side's table is a different random choice of its own pool's blocks, the
// same for every layer and for K and V. So the request is 2 x layers x
// kv_blocks chunks, scattered differently on the two sides, moved with ONE
// block request (submitBlocks; with `plan`, a plan prepared once and posted).
// A file target is the shape of a KV offload tier: the chunks lie there one
// after another (layer, K/V, block), the memory side stays scattered.
//
// Each round moves, in an order that alternates between rounds:
//   - the KV chunks as one block request;
//   - the same number of bytes contiguous on both sides, as one block
//     request (runs of block.max_run);
//   - the same bytes as 1 MiB requests of one batch;
// and every byte of every transfer is verified (reads: the local memory is
// cleared before and checked after; writes: a pattern of its own per
// transfer, read back). Medians of the rounds are reported with the ratio
// KV / contiguous, the transport that carried the KV request and, where the
// engine copies GPU memory, the copy mechanism and CTAs its counters show.
#pragma once

#include <cstddef>
#include <string>

#include "tools/bench_common.h"

namespace hawser::tools {

struct KvBenchOpts : BenchBasics {
  KvBenchOpts() { block_size = "32K"; }
  size_t layers = 8;
  size_t kv_blocks = 500;
  size_t kv_pool = 0;  // blocks per layer and K/V on each side; 0: 2 x kv_blocks
  bool plan = false;   // prepareBlocks once, postPlan each round (instead of submitBlocks each round)
  // Transfers of each way timed one after another in a round (each waited
  // for before the next is posted): 1 times a request issued alone; more
  // time a stream of them, as the GPU baseline's back-to-back copies.
  size_t repeat = 1;
  std::string local_location = "cpu";  // cpu, or cuda:N
};

int runKvBench(const KvBenchOpts& o);

}  // namespace hawser::tools
