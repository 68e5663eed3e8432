// What the block-request benches share (bench_blocks.cpp, bench_kv.cpp):
// timing one batch, medians, the calling thread's CPU time, and whether a
// segment is a file.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "hawser/engine.h"

namespace hawser::tools {

// What every mode of `hawser bench` takes: the segment it drives, how this
// engine reaches it, and the run's basics (each mode sets its own default
// block size).
struct BenchBasics {
  std::string target;
  std::string metadata = "p2p";
  std::string name;  // this engine's; "": the host
  std::string host = "127.0.0.1";
  std::string op = "read";
  std::string block_size;
  size_t rounds = 5;  // the modes that run interleaved rounds
  bool json = false;
};

// init, openSegment and segmentBuffers (at least one); false after printing
// "hawser bench: <the step>: <why>".
inline bool openBenchTarget(TransferEngine& e, const BenchBasics& ep, SegmentID& seg,
                            std::vector<SegmentBuffer>& bufs) {
  auto failed = [](const std::string& what, const Status& s) {
    fmt::print(stderr, "hawser bench: {}: {}\n", what, s.toString());
    return false;
  };
  Status s = e.init(ep.metadata, ep.name.empty() ? ep.host : ep.name, ep.host, 0);
  if (!s.ok()) return failed("init", s);
  if (!(s = e.openSegment(ep.target, seg)).ok()) return failed(fmt::format("open segment '{}'", ep.target), s);
  if (!(s = e.segmentBuffers(seg, bufs)).ok()) return failed("segment buffers", s);
  if (bufs.empty()) return failed("segment buffers", Status(Code::kOutOfRange, "the segment exposes no buffer"));
  return true;
}

// CPU time of the calling thread, seconds.
inline double threadCpuNow() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

inline double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `submit` into a fresh batch of `capacity` and waits for it: `seconds`
// from the submit to the end, `submit_cpu` (optional) the submit's CPU time.
// Ok only when every task COMPLETED.
template <class F>
Status timedBatch(TransferEngine& e, size_t capacity, F&& submit, double& seconds, double* submit_cpu = nullptr) {
  using Clock = std::chrono::steady_clock;
  BatchID b;
  Status s = e.allocateBatchID(capacity, b);
  if (!s.ok()) return s;
  const auto t0 = Clock::now();
  const double c0 = threadCpuNow();
  s = submit(b);
  if (submit_cpu) *submit_cpu = threadCpuNow() - c0;
  if (s.ok()) s = e.waitTransfer(b, std::chrono::seconds(300));
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  TransferStatus st;
  if (s.ok()) s = e.getBatchTransferStatus(b, st);
  if (s.ok() && st.s != TransferState::kCompleted)
    s = st.error.ok() ? Status(Code::kInternal, fmt::format("batch ended {}", stateName(st.s))) : st.error;
  Status f = e.freeBatchID(b);
  return s.ok() ? f : s;
}

// A file segment: named file://..., or its buffers are files (not cpu/cuda memory).
inline bool isFileSegment(const std::string& target, const std::vector<SegmentBuffer>& bufs) {
  return target.rfind("file://", 0) == 0 ||
         (!bufs.empty() && bufs[0].location.rfind("cpu", 0) != 0 && bufs[0].location.rfind("cuda", 0) != 0);
}

}  // namespace hawser::tools
