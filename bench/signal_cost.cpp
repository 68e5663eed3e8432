// signal_cost: what a signal costs a stream of small submits. Two engines in
// this process over one transport; the initiator keeps `window` batches of
// one 4 KiB write in flight (each waited for with waitTransfer, which for a
// submit with a signal includes its receiver taking the outcome), plain and
// with a signal per submit, alternating, `rounds` times each; prints the
// submits per second of every run and the medians.
//
// Usage: signal_cost [--transport tcp|shm] [--submits N] [--window W] [--rounds R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hawser/engine.h"

using namespace hawser;

int main(int argc, char** argv) {
  std::string transport = "tcp";
  int submits = 20000, window = 64, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--transport")) transport = argv[i + 1];
    else if (!std::strcmp(argv[i], "--submits")) submits = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--window")) window = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::stoi(argv[i + 1]);
    else return std::fprintf(stderr, "usage: %s [--transport T] [--submits N] [--window W] [--rounds R]\n", argv[0]), 2;
  }
  EngineOptions o;
  o.config = {{"transport", transport}};
  TransferEngine a, b;
  std::vector<char> src(window * 4096), dst(window * 4096);
  SegmentID seg = kInvalidSegment;
  Status s;
  if (!(s = a.init("p2p", "a", "127.0.0.1", 0, o)).ok() || !(s = b.init("p2p", "b", "127.0.0.1", 0, o)).ok() ||
      !(s = a.registerLocalMemory(src.data(), src.size(), "cpu:0", false)).ok() ||
      !(s = b.registerLocalMemory(dst.data(), dst.size(), "cpu:0", true)).ok() ||
      !(s = a.openSegment(b.segmentName(), seg)).ok())
    return std::fprintf(stderr, "signal_cost: %s\n", s.toString().c_str()), 1;
  const uint64_t remote = reinterpret_cast<uint64_t>(dst.data());
  std::vector<double> rate[2];
  for (int run = 0; run < 2 * rounds; ++run) {
    const bool with = run % 2 == 1;
    std::vector<BatchID> ring(window, kInvalidBatch);
    auto finish = [&](BatchID& id) {
      if (id == kInvalidBatch) return true;
      bool ok = a.waitTransfer(id, std::chrono::seconds(60)).ok() && a.freeBatchID(id).ok();
      id = kInvalidBatch;
      return ok;
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < submits; ++i) {
      BatchID& id = ring[i % window];
      const size_t slot = static_cast<size_t>(i % window) * 4096;
      if (!finish(id) || !(s = a.allocateBatchID(1, id)).ok())
        return std::fprintf(stderr, "signal_cost: batch: %s\n", s.toString().c_str()), 1;
      std::vector<TransferRequest> req{{OpCode::kWrite, src.data() + slot, seg, remote + slot, 4096}};
      s = with ? a.submitTransfer(id, req, Signal{"s" + std::to_string(i)}) : a.submitTransfer(id, req);
      if (!s.ok()) return std::fprintf(stderr, "signal_cost: submit: %s\n", s.toString().c_str()), 1;
    }
    for (auto& id : ring)
      if (!finish(id)) return std::fprintf(stderr, "signal_cost: a batch did not end\n"), 1;
    const double r = submits / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rate[with].push_back(r);
    std::printf("%s %-11s %d submits of 4 KiB, %d in flight: %.0f submits/s\n", transport.c_str(),
                with ? "with signal" : "plain", submits, window, r);
  }
  for (auto& v : rate) std::sort(v.begin(), v.end());
  std::printf("%s medians: plain %.0f, with signal %.0f submits/s\n", transport.c_str(), rate[0][rounds / 2],
              rate[1][rounds / 2]);
  return 0;
}
