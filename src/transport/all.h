// Every transport this build has, in preference order.
#pragma once

#include <memory>
#include <vector>

#include "core/transport.h"

namespace hawser {

std::unique_ptr<Transport> makeTcpTransport();
std::unique_ptr<Transport> makeFileTransport();
std::unique_ptr<Transport> makeRdmaTransport();

// Fresh instances of every transport compiled in (not yet installed), most
// preferred first: rdma, tcp, file.
std::vector<std::unique_ptr<Transport>> makeTransports();

}  // namespace hawser
