// The shared transport suite (integrity, bad input, peer failure,
// notifications, signals, block requests) with GPU memory over the
// transports that are not GPU-only, as UCX runs its suite over every
// resource and memory type: tcp with the initiator's buffers on GPU 0 and
// the target's memory on GPU 0 or host memory (and host buffers against a
// GPU target), rdma over the software verbs provider with both on GPU 0.
// As gpu_sim.* it runs against the stand-in driver; as gpu.* on a host
// with a GPU, where rdma is skipped (the software provider reaches the
// stand-in's dma-bufs, not a real GPU's); elsewhere every case is skipped
// with the reason.
#include "common/transport_suite.h"
#include "gpu/gpu_env.h"

#if HAWSER_TEST_RDMA
#include "softverbs/soft_env.h"
#endif

namespace {

using hawser::test::SuiteParam;
using hawser::test::TransportSuite;

// tcp with `local` buffers and `target` memory ("cpu" or "cuda:0"). No rdma
// in either engine: on a GPU host with RDMA NICs it would try to register
// the GPU memory.
SuiteParam tcpParam(const std::string& local, const std::string& target) {
  SuiteParam p;
  p.transport = "tcp";
  p.env = {"HAWSER_GPU_CUDA_DRIVER=" + hawser::test::testCudaDriverPath(),
           "HAWSER_RDMA_VERBS_LIB=/nonexistent/libibverbs.so.1"};
  p.skip = hawser::test::noGpuReason;
  p.local_location = local;
  p.target_location = target;
  return p;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(TcpGpu, TransportSuite, ::testing::Values(tcpParam("cuda:0", "cuda:0")),
                         hawser::test::suiteName);
INSTANTIATE_TEST_SUITE_P(TcpGpuToHost, TransportSuite, ::testing::Values(tcpParam("cuda:0", "cpu")),
                         hawser::test::suiteName);
INSTANTIATE_TEST_SUITE_P(TcpHostToGpu, TransportSuite, ::testing::Values(tcpParam("cpu", "cuda:0")),
                         hawser::test::suiteName);

#if HAWSER_TEST_RDMA
namespace {

SuiteParam rdmaParam() {
  SuiteParam p;
  p.transport = "rdma";
  p.env = {"HAWSER_GPU_CUDA_DRIVER=" + hawser::test::testCudaDriverPath(),
           std::string("HAWSER_RDMA_VERBS_LIB=") + hawser::test::softVerbsLib(), "HAWSER_SOFTVERBS_DEVICES=sv0,sv1",
           std::string("HAWSER_SOFTVERBS_DIR=") + HAWSER_BUILD_DIR + "/softverbs-suite"};
  p.skip = []() -> std::string {
    if (std::string why = hawser::test::noGpuReason(); !why.empty()) return why;
    if (!hawser::test::simulatedCuda())
      return "the software verbs provider cannot reach a real GPU's memory (needs a real NIC)";
    return "";
  };
  p.local_location = "cuda:0";
  p.target_location = "cuda:0";
  return p;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(RdmaGpu, TransportSuite, ::testing::Values(rdmaParam()), hawser::test::suiteName);
#endif
