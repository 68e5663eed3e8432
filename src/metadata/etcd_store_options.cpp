#include "metadata/etcd_store_options.h"

#include <cctype>

#include "base/config.h"

namespace hawser {

namespace {

Status badConfig(const std::string& key, const std::string& value, const std::string& why) {
  return Status(Code::kInvalidArgument,
                key + " (env " + Config::envName(key) + ") = '" + value + "': " + why);
}

}  // namespace

Status checkSegmentName(const std::string& name) {
  if (name.empty()) return Status(Code::kInvalidArgument, "segment name is empty");
  if (name.size() > 255)
    return Status(Code::kInvalidArgument, "segment name '" + name.substr(0, 32) + "...' is longer than 255 bytes");
  for (unsigned char c : name) {
    if (c == '/' || std::isspace(c) || std::iscntrl(c))
      return Status(Code::kInvalidArgument,
                    "segment name '" + name + "' contains '/', whitespace or a control character");
  }
  return Status::OK();
}

Status etcdOptionsFromConfig(Config& config, EtcdStoreOptions& out) {
  out = EtcdStoreOptions{};
  Status st = config.getString("metadata.prefix", out.prefix);
  if (!st.ok()) return st;
  if (out.prefix.empty()) return badConfig("metadata.prefix", out.prefix, "must not be empty");
  if (out.prefix.back() == '/') return badConfig("metadata.prefix", out.prefix, "must not end with '/'");
  for (unsigned char c : out.prefix) {
    if (std::isspace(c) || std::iscntrl(c))
      return badConfig("metadata.prefix", out.prefix, "contains whitespace or a control character");
  }
  // Types and ranges: the config table (base/config_table.h).
  if (!(st = config.getInt("etcd.lease_ttl_s", out.lease_ttl_s)).ok() ||
      !(st = config.getDuration("etcd.timeout_ms", out.client.timeout)).ok() ||
      !(st = config.getDuration("etcd.connect_timeout_ms", out.client.connect_timeout)).ok() ||
      !(st = config.getInt("etcd.retries", out.client.retries)).ok() ||
      !(st = config.getDuration("etcd.backoff_max_ms", out.backoff_max)).ok())
    return st;
  return Status::OK();
}

}  // namespace hawser
