// etcd endpoints: "host:port" entries of an etcd:// (plain HTTP) or
// etcds:// (TLS) metadata URI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/status.h"

namespace hawser::etcd {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string text() const;  // "host:port" ("[v6]:port" for IPv6 literals)
};

// Parses "etcd://host:port[,host:port...]" (or "etcds://...") strictly:
// kInvalidArgument naming the URI and the part at fault for anything else
// (no scheme, empty list, empty host, missing/zero/non-numeric port, paths,
// spaces, duplicates). `tls` (optional) is set for etcds://.
Status parseUri(const std::string& uri, std::vector<Endpoint>& out, bool* tls = nullptr);

// True when `uri` names etcd (etcd:// or etcds://).
bool isEtcdUri(const std::string& uri);

}  // namespace hawser::etcd
