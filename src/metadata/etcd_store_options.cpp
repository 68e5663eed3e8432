#include "metadata/etcd_store_options.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/config.h"

namespace hawser {

namespace {

Status badConfig(const std::string& key, const std::string& value, const std::string& why) {
  return Status(Code::kInvalidArgument,
                key + " (env " + Config::envName(key) + ") = '" + value + "': " + why);
}

}  // namespace

namespace {

// `path` can be opened for reading; kInvalidArgument naming the key otherwise.
Status readable(const std::string& key, const std::string& path) {
  if (path.empty()) return Status::OK();
  std::ifstream in(path);
  if (!in)
    return Status(Code::kInvalidArgument, key + " (env " + Config::envName(key) + ") = '" + path +
                                              "': cannot be read: " + std::strerror(errno));
  return Status::OK();
}

}  // namespace

Status etcdSecurityFromConfig(Config& config, const std::string& uri, bool tls, etcd::Security& out) {
  out = etcd::Security{};
  out.tls = tls;
  std::string password_file;
  Status st;
  if (!(st = config.getString("etcd.ca_file", out.ca_file)).ok() ||
      !(st = config.getString("etcd.cert_file", out.cert_file)).ok() ||
      !(st = config.getString("etcd.key_file", out.key_file)).ok() ||
      !(st = config.getString("etcd.user", out.user)).ok() ||
      !(st = config.getString("etcd.password", out.password)).ok() ||
      !(st = config.getString("etcd.password_file", password_file)).ok())
    return st;
  if (!tls) {
    const std::pair<const char*, const std::string*> files[] = {
        {"etcd.ca_file", &out.ca_file}, {"etcd.cert_file", &out.cert_file}, {"etcd.key_file", &out.key_file}};
    for (const auto& [key, value] : files) {
      const std::string& v = *value;
      if (!v.empty())
        return badConfig(key, v, "TLS settings need a TLS endpoint, but the metadata URI '" + uri +
                                     "' is plain HTTP: write it etcds://");
    }
  }
  if (out.cert_file.empty() != out.key_file.empty())
    return Status(Code::kInvalidArgument,
                  out.cert_file.empty()
                      ? "etcd.key_file (env HAWSER_ETCD_KEY_FILE) is set without etcd.cert_file (HAWSER_ETCD_CERT_FILE)"
                      : "etcd.cert_file (env HAWSER_ETCD_CERT_FILE) is set without etcd.key_file (HAWSER_ETCD_KEY_FILE)");
  if (!(st = readable("etcd.ca_file", out.ca_file)).ok() || !(st = readable("etcd.cert_file", out.cert_file)).ok() ||
      !(st = readable("etcd.key_file", out.key_file)).ok() ||
      !(st = readable("etcd.password_file", password_file)).ok())
    return st;
  if (!password_file.empty()) {
    if (!out.password.empty())
      return Status(Code::kInvalidArgument,
                    "etcd.password (env HAWSER_ETCD_PASSWORD) and etcd.password_file (env HAWSER_ETCD_PASSWORD_FILE) "
                    "are both set: keep one");
    std::ifstream in(password_file);
    std::getline(in, out.password);
    if (!out.password.empty() && out.password.back() == '\r') out.password.pop_back();
    if (out.password.empty())
      return badConfig("etcd.password_file", password_file, "its first line (the password) is empty");
  }
  if (!out.password.empty() && out.user.empty())
    return Status(Code::kInvalidArgument, "an etcd password is set but etcd.user (env HAWSER_ETCD_USER) is not");
  if (!out.user.empty() && out.password.empty())
    return Status(Code::kInvalidArgument,
                  "etcd.user (env HAWSER_ETCD_USER) = '" + out.user +
                      "' has no password: set etcd.password (env HAWSER_ETCD_PASSWORD) or etcd.password_file "
                      "(env HAWSER_ETCD_PASSWORD_FILE)");
  return Status::OK();
}

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
