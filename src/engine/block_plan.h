// A block request, validated: the runs it moves (blocks contiguous on both
// sides merged), the segment view and route they take. Made once by
// block_requests.cpp (submitBlocks, submitStrided, prepare*), immutable
// after, shared by every task posted from it (block_runner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/registry.h"
#include "engine/selection.h"
#include "hawser/types.h"

namespace hawser {

// One run: a range contiguous on both sides, inside one local region and
// one remote buffer.
struct Run {
  uint64_t local = 0;
  uint64_t remote = 0;
  uint64_t length = 0;
};

// The tunables of block requests (config keys block.*).
struct BlockSettings {
  uint64_t max_run = 64 << 20;  // block.max_run: blocks are merged into runs up to this size
  size_t window = 1024;         // block.window: runs one lane hands a transport at once
  size_t run_window = 8192;     // block.run_window: the same, for transports that move windows of runs
  size_t first_run_window = 8192;  // block.first_run_window: a one-shot request's first run window
  size_t lanes = 4;             // block.lanes: windows of one task in flight at once
};

// Blocks as given to submitBlocks/prepareBlocks: an array of Block, or
// parallel arrays (BlockArrays), read one block at a time. arrays.route is
// the request's contract in both forms.
struct BlockSource {
  size_t count = 0;
  const Block* blocks = nullptr;  // set: the array form; else the parallel arrays below
  BlockArrays arrays;

  static BlockSource of(std::span<const Block> b) {
    BlockSource s;
    s.count = b.size();
    s.blocks = b.data();
    return s;
  }
  static BlockSource of(const BlockArrays& a) {
    BlockSource s;
    s.count = a.count;
    s.arrays = a;
    return s;
  }
  Run at(size_t i) const {
    if (blocks) return Run{reinterpret_cast<uint64_t>(blocks[i].local), blocks[i].remote, blocks[i].length};
    return Run{arrays.local[i], arrays.remote[i], arrays.lengths ? arrays.lengths[i] : arrays.block_length};
  }
};

struct BlockPlan {
  OpCode op = OpCode::kRead;
  SegmentID target = kInvalidSegment;
  std::shared_ptr<const SegmentView> view;
  const Route* route = nullptr;  // into view->routes
  const Route* fallback = nullptr;  // set: the cheaper route that declined (engine/selection.h), counted per post
  RouteDecline fallback_why;        // and why
  size_t blocks = 0;             // as given
  size_t runs = 0;
  uint64_t bytes = 0;
  // Remote buffer of every run (memory segments), -1 for file segments, or
  // kPerRun when the runs lie in different buffers (run_buffer then holds
  // each run's, found when the plan was checked).
  static constexpr int kPerRun = -2;
  int buffer = -1;
  std::vector<int32_t> run_buffer;
  int32_t bufferOf(size_t i) const { return buffer == kPerRun ? run_buffer[i] : buffer; }
  // MemoryRegistry::removals() when the local side was checked.
  uint64_t removals = 0;
  // Made by prepareBlocks/prepareStrided: posted any number of times.
  bool prepared = false;

  // Runs are either strided (run i at local_base + i * local_stride,
  // remote_base + i * remote_stride, `length` bytes, the last `tail`) or
  // listed.
  bool strided = false;
  uint64_t local_base = 0, remote_base = 0, length = 0, local_stride = 0, remote_stride = 0, tail = 0;
  std::vector<Run> list;

  // The local regions the runs lie in, found when the plan was checked,
  // each with the registration of the route's transport (handed to it with
  // every task or window of runs: found once, never looked up per block),
  // and the region of every run: empty when every run is in regions[0].
  std::vector<LocalRegion> regions;
  std::vector<uint32_t> run_region;
  uint32_t regionOf(size_t i) const { return run_region.empty() ? 0 : run_region[i]; }

  Run run(size_t i) const {
    if (!strided) return list[i];
    return Run{local_base + i * local_stride, remote_base + i * remote_stride, i + 1 == runs ? tail : length};
  }
  // Engine memory the plan itself holds, per run.
  size_t memoryBytes() const {
    return sizeof(*this) + list.capacity() * sizeof(Run) + regions.capacity() * sizeof(LocalRegion) +
           run_region.capacity() * sizeof(uint32_t) + run_buffer.capacity() * sizeof(int32_t);
  }
};

}  // namespace hawser
