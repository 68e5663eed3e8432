#include "transport/rdma/rdma_testing.h"

namespace hawser::rdma::testing {

std::atomic<ContextHook> on_cq_full{nullptr};
std::atomic<ContextHook> after_drain{nullptr};
std::atomic<CountersHook> after_shutdown{nullptr};

}  // namespace hawser::rdma::testing
