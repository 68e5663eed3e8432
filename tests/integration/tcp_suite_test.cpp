// The shared transport suite over TCP (a `hawser serve` child process).
#include "common/transport_suite.h"

using hawser::test::TransportSuite;

INSTANTIATE_TEST_SUITE_P(Tcp, TransportSuite, ::testing::Values(hawser::test::SuiteParam{"tcp", {}, {}}),
                         hawser::test::suiteName);
