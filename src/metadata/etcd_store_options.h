// The etcd store's tunables (read from the config table) and the rule for
// segment names that become etcd keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "hawser/status.h"
#include "metadata/etcd_client.h"

namespace hawser {

class Config;

struct EtcdStoreOptions {
  std::string prefix = "hawser";      // metadata.prefix
  int64_t lease_ttl_s = 10;           // etcd.lease_ttl_s
  std::chrono::milliseconds backoff_max{2000};  // etcd.backoff_max_ms
  etcd::Options client;               // etcd.timeout_ms, etcd.connect_timeout_ms, etcd.retries
};

// Reads the etcd tunables from `config`; kInvalidArgument naming the key and
// value for out-of-range values.
Status etcdOptionsFromConfig(Config& config, EtcdStoreOptions& out);

// Reads the TLS and authentication settings (etcd.ca_file, etcd.cert_file,
// etcd.key_file, etcd.user, etcd.password, etcd.password_file) for `uri`
// (`tls`: it is etcds://). kInvalidArgument naming the key for a file that
// cannot be read, a certificate without its key, TLS files with a plain
// etcd:// URI, a password without a user, or both password sources.
Status etcdSecurityFromConfig(Config& config, const std::string& uri, bool tls, etcd::Security& out);

// Segment names: 1..255 bytes, no '/', no whitespace or control characters.
Status checkSegmentName(const std::string& name);

}  // namespace hawser
