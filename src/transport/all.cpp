#include "transport/all.h"

namespace hawser {

std::vector<std::unique_ptr<Transport>> makeTransports() {
  std::vector<std::unique_ptr<Transport>> all;
#if HAWSER_HAVE_RDMA
  all.push_back(makeRdmaTransport());
#endif
#if HAWSER_HAVE_TCP
  all.push_back(makeTcpTransport());
#endif
#if HAWSER_HAVE_FILE
  all.push_back(makeFileTransport());
#endif
  return all;
}

}  // namespace hawser
