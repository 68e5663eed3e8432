#include "metadata/etcd_codec.h"

namespace hawser::etcd {

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64Value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

std::string base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  size_t rem = in.size() - i;
  if (rem == 1) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (rem == 2) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool base64Decode(std::string_view in, std::string& out) {
  out.clear();
  size_t pad = 0;
  while (!in.empty() && in.back() == '=') {
    in.remove_suffix(1);
    if (++pad > 2) return false;
  }
  if ((in.size() + pad) % 4 != 0 && pad != 0) return false;
  if (in.size() % 4 == 1) return false;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    int v = b64Value(c);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return true;
}

std::string prefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xFF) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

int64_t jsonInt(const nlohmann::json& j, const char* field, int64_t def) {
  if (!j.is_object()) return def;
  auto it = j.find(field);
  if (it == j.end()) return def;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    try {
      size_t used = 0;
      long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (...) {
    }
  }
  return def;
}

bool parseKv(const nlohmann::json& j, KeyValue& out) {
  if (!j.is_object()) return false;
  auto k = j.find("key");
  if (k == j.end() || !k->is_string() || !base64Decode(k->get<std::string>(), out.key)) return false;
  out.value.clear();
  auto v = j.find("value");
  if (v != j.end()) {
    if (!v->is_string() || !base64Decode(v->get<std::string>(), out.value)) return false;
  }
  out.create_revision = jsonInt(j, "create_revision");
  out.mod_revision = jsonInt(j, "mod_revision");
  out.version = jsonInt(j, "version");
  out.lease = jsonInt(j, "lease");
  return true;
}

}  // namespace hawser::etcd
