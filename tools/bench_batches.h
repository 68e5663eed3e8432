// `hawser bench` without --blocks or --layout kv: an initiator driving READ
// or WRITE batches against a segment (a `hawser serve` target, or a file
// segment), with verification, live progress and a summary (text, or one
// JSON object on the last line).
#pragma once

#include <cstddef>
#include <string>

#include "tools/bench_common.h"

namespace hawser::tools {

struct BenchOpts : BenchBasics {
  BenchOpts() { block_size = "1M"; }
  size_t batch_size = 32;
  size_t threads = 2;
  size_t depth = 1;         // batches in flight per thread
  std::string span;         // memory each thread's requests cycle through, per side ("": a block per request)
  bool huge_pages = false;  // local buffers on reserved huge pages (MAP_HUGETLB)
  int cpu_pid = 0;          // a local process (the target) whose CPU time is counted too
  double seconds = 0;
  std::string total;
  bool no_verify = false;
  std::string target_offset = "0";
  std::string local_location = "cpu";  // cpu, or cuda:N: where the initiator's buffers live
  // --blocks N: block requests instead (tools/bench_blocks.h).
  size_t blocks = 0;
  std::string layout = "contiguous";
  // --layout kv: a paged KV cache (tools/bench_kv.h).
  size_t layers = 8;
  size_t kv_blocks = 500;
  size_t kv_pool = 0;
  bool kv_plan = false;
  size_t kv_repeat = 1;
};

// The exit code: 0, 1 (a step failed), 2 (bad options), 3 (the data did not
// verify).
int runBench(const BenchOpts& o);

}  // namespace hawser::tools
