// The shared transport suite (integrity, bad input, peer failure) over the
// nvlink transport: the initiator's buffers on GPU 0 of this process, the
// target `hawser serve --location cuda:0`. As gpu_sim.* it runs against the
// stand-in driver (whose IPC handles cross processes too); as gpu.* on a
// host with a GPU; elsewhere every case is skipped with the reason.

#include "common/transport_suite.h"
#include "gpu/gpu_env.h"

namespace {

using hawser::test::SuiteParam;
using hawser::test::TransportSuite;

SuiteParam nvlinkParam() {
  SuiteParam p;
  p.transport = "nvlink";
  p.env = {"HAWSER_GPU_CUDA_DRIVER=" + hawser::test::testCudaDriverPath()};
  p.skip = hawser::test::noGpuReason;
  p.local_location = "cuda:0";
  p.target_location = "cuda:0";
  // A GPU copies 16 MiB in microseconds: keep far more in flight there so
  // the target dies mid-batch. On an H200, 1024 rounds (512 GiB) were done
  // before the owner's death was noticed; 8192 rounds are 4 TiB, seconds of
  // copying within one GPU. The stand-in driver: 64 rounds (32 GiB). With 8
  // (4 GiB) the batch once ended between the test's look at it and the
  // hold of the copies (CI's ASan run beside the TSan build); the copies
  // that follow the kill never run, so more rounds cost no time.
  p.kill_rounds = hawser::test::simulatedCuda() ? 64 : 8192;
  // Seen on an H200: the killed owner exited only once the copies that used
  // its memory had ended, in two runs of three, so the batch completed.
  p.kill_may_complete = !hawser::test::simulatedCuda();
  if (hawser::test::simulatedCuda()) {
    p.hold_copies = [](bool on) {
      if (auto f = hawser::test::fakeHook<void (*)(int)>("hawserFakeCudaHoldStreams")) f(on ? 1 : 0);
    };
    p.death_counter = "owner_deaths";
  }
  p.open_handles = hawser::test::openedIpcHandles;
  return p;
}


// The same over CUDA virtual memory (the target's memory: 2 MiB physical
// allocations mapped back to back, shared by file descriptor over the
// owner's socket: what PyTorch's expandable segments give).
SuiteParam nvlinkVmmParam() {
  SuiteParam p = nvlinkParam();
  p.target_args = {"--gpu-memory", "vmm"};
  return p;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Nvlink, TransportSuite, ::testing::Values(nvlinkParam()), hawser::test::suiteName);
INSTANTIATE_TEST_SUITE_P(NvlinkVmm, TransportSuite, ::testing::Values(nvlinkVmmParam()), hawser::test::suiteName);
