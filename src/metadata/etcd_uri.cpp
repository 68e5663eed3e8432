#include "metadata/etcd_uri.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

namespace hawser::etcd {

namespace {

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool validHostChar(unsigned char c) { return std::isalnum(c) || c == '.' || c == '-' || c == '_'; }

}  // namespace

std::string Endpoint::text() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool isEtcdUri(const std::string& uri) { return uri.rfind("etcd://", 0) == 0 || uri.rfind("etcds://", 0) == 0; }

Status parseUri(const std::string& uri, std::vector<Endpoint>& out, bool* tls) {
  out.clear();
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "metadata URI '" + uri + "': " + why +
                                              " (expected etcd://host:port[,host:port...], or etcds:// for TLS)");
  };
  const bool secure = uri.rfind("etcds://", 0) == 0;
  if (!secure && uri.rfind("etcd://", 0) != 0) return bad("scheme is not etcd:// or etcds://");
  if (tls) *tls = secure;
  std::string_view rest(uri);
  rest.remove_prefix(secure ? 8 : 7);
  if (rest.empty()) return bad("no endpoint");
  std::set<std::string> seen;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    std::string p(part);
    if (part.empty()) return bad("empty endpoint in the list");
    Endpoint ep;
    std::string_view port_text;
    if (part.front() == '[') {
      size_t close = part.find(']');
      if (close == std::string_view::npos || close + 1 >= part.size() || part[close + 1] != ':')
        return bad("endpoint '" + p + "' is not [ipv6]:port");
      ep.host = std::string(part.substr(1, close - 1));
      port_text = part.substr(close + 2);
      if (ep.host.empty() ||
          !std::all_of(ep.host.begin(), ep.host.end(),
                       [](unsigned char c) { return std::isxdigit(c) || c == ':' || c == '.'; }))
        return bad("endpoint '" + p + "' has a malformed IPv6 address");
    } else {
      size_t colon = part.rfind(':');
      if (colon == std::string_view::npos) return bad("endpoint '" + p + "' has no port");
      ep.host = std::string(part.substr(0, colon));
      port_text = part.substr(colon + 1);
      if (ep.host.empty()) return bad("endpoint '" + p + "' has an empty host");
      if (!std::all_of(ep.host.begin(), ep.host.end(), validHostChar))
        return bad("endpoint '" + p + "' has a malformed host");
    }
    if (!isDigits(port_text) || port_text.size() > 5) return bad("endpoint '" + p + "' has a malformed port");
    int port = std::stoi(std::string(port_text));
    if (port < 1 || port > 65535) return bad("endpoint '" + p + "' has port out of range 1..65535");
    ep.port = static_cast<uint16_t>(port);
    if (!seen.insert(ep.text()).second) return bad("endpoint '" + p + "' is listed twice");
    out.push_back(std::move(ep));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return Status::OK();
}

}  // namespace hawser::etcd
