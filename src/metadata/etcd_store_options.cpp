#include "metadata/etcd_store_options.h"

#include <cctype>

#include "base/config.h"

namespace hawser {

namespace {

using std::chrono::milliseconds;

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
  out.prefix = config.getString("metadata.prefix", "hawser");
  if (out.prefix.empty()) return badConfig("metadata.prefix", out.prefix, "must not be empty");
  if (out.prefix.back() == '/') return badConfig("metadata.prefix", out.prefix, "must not end with '/'");
  for (unsigned char c : out.prefix) {
    if (std::isspace(c) || std::iscntrl(c))
      return badConfig("metadata.prefix", out.prefix, "contains whitespace or a control character");
  }
  auto intIn = [&](const char* key, int64_t def, int64_t lo, int64_t hi, int64_t& v) -> Status {
    v = config.getInt(key, def);
    if (v < lo || v > hi)
      return badConfig(key, std::to_string(v), "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
    return Status::OK();
  };
  int64_t v = 0;
  Status st = intIn("etcd.lease_ttl_s", 10, 2, 86400, v);
  if (!st.ok()) return st;
  out.lease_ttl_s = v;
  if (!(st = intIn("etcd.timeout_ms", 3000, 10, 600000, v)).ok()) return st;
  out.client.timeout = milliseconds(v);
  if (!(st = intIn("etcd.connect_timeout_ms", 1000, 10, 600000, v)).ok()) return st;
  out.client.connect_timeout = milliseconds(v);
  if (!(st = intIn("etcd.retries", 2, 0, 10, v)).ok()) return st;
  out.client.retries = static_cast<int>(v);
  if (!(st = intIn("etcd.backoff_max_ms", 2000, 10, 600000, v)).ok()) return st;
  out.backoff_max = milliseconds(v);
  return Status::OK();
}

}  // namespace hawser
