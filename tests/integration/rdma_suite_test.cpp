// The shared transport suite (integrity, bad input, peer failure) over the
// rdma transport, both engines running it over the software verbs provider
// with two NICs. The provider's registry (one host's NICs) lives in the
// build directory and is shared by the concurrently running suite tests.
#include "common/transport_suite.h"

using hawser::test::SuiteParam;
using hawser::test::TransportSuite;

#if HAWSER_TEST_RDMA
INSTANTIATE_TEST_SUITE_P(Rdma, TransportSuite,
                         ::testing::Values(SuiteParam{"rdma",
                                                      {std::string("HAWSER_RDMA_VERBS_LIB=") + HAWSER_SOFTVERBS_LIB,
                                                       "HAWSER_SOFTVERBS_DEVICES=sv0,sv1",
                                                       std::string("HAWSER_SOFTVERBS_DIR=") + HAWSER_BUILD_DIR + "/softverbs-suite"},
                                                      {},
                                                      hawser::Code::kUnavailable,
                                                      // A remote access error (the MR is gone) is refused at
                                                      // once, not retried: kOutOfRange, as other transports.
                                                      hawser::Code::kOutOfRange}),
                         hawser::test::suiteName);
#else
TEST(RdmaSuite, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
