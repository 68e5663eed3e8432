// `hawser bench --blocks N`: block requests (docs/blocks.md) against a
// segment, with the limits they are judged by measured in the same run,
// interleaved round by round (medians):
//   - the same bytes moved as 1 MiB requests (bytes/s),
//   - one block alone, round trip (blocks/s),
//   - the N blocks as N separate requests of one batch (blocks/s: what a
//     caller without block requests does).
// The block request is a plan prepared once and posted every round; the CPU
// time of the first submit and of each post is reported too.
#pragma once

#include <cstddef>
#include <string>

#include "tools/bench_common.h"

namespace hawser::tools {

struct BlockBenchOpts : BenchBasics {
  BlockBenchOpts() { block_size = "4K"; }
  size_t blocks = 0;
  std::string layout = "contiguous";  // contiguous | scattered | strided
  bool no_verify = false;
};

int runBlockBench(const BlockBenchOpts& o);

}  // namespace hawser::tools
