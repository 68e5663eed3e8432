#include "base/config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace hawser {

std::optional<uint64_t> parseSize(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  uint64_t mult = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'B' && text.size() > 1) {  // "64KB", "1MiB" forms: drop trailing B / iB
    text.remove_suffix(1);
    if (!text.empty() && (text.back() == 'i' || text.back() == 'I')) text.remove_suffix(1);
    last = text.empty() ? '\0' : static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  }
  switch (last) {
    case 'K': mult = 1ull << 10; break;
    case 'M': mult = 1ull << 20; break;
    case 'G': mult = 1ull << 30; break;
    case 'T': mult = 1ull << 40; break;
    default: break;
  }
  if (mult != 1) text.remove_suffix(1);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  if (v != 0 && mult > UINT64_MAX / v) return std::nullopt;
  return v * mult;
}

std::string Config::envName(std::string_view key) {
  std::string out = "HAWSER_";
  for (char c : key) out += (c == '.' || c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

Config Config::fromEnv() {
  Config c;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, 7) != "HAWSER_") continue;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key;
    for (char ch : kv.substr(7, eq - 7)) key += ch == '_' ? '.' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    c.values_[key] = std::string(kv.substr(eq + 1));
  }
  return c;
}

void Config::set(std::string_view key, std::string value) {
  std::lock_guard lk(mu_);
  values_[std::string(key)] = std::move(value);
}

std::optional<std::string> Config::raw(std::string_view key) const {
  std::lock_guard lk(mu_);
  auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  // Keys with '_' inside a component ("max_io_size") map from env names
  // ambiguously; look the env up directly as well.
  if (const char* v = std::getenv(envName(key).c_str())) return std::string(v);
  return std::nullopt;
}

std::string Config::getString(std::string_view key, std::string_view def) const {
  auto v = raw(key);
  return v ? *v : std::string(def);
}

int64_t Config::getInt(std::string_view key, int64_t def) const {
  auto v = raw(key);
  if (!v) return def;
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size()) return def;
  return out;
}

uint64_t Config::getSize(std::string_view key, uint64_t def) const {
  auto v = raw(key);
  if (!v) return def;
  auto s = parseSize(*v);
  return s ? *s : def;
}

bool Config::getBool(std::string_view key, bool def) const {
  auto v = raw(key);
  if (!v) return def;
  std::string s;
  for (char c : *v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return def;
}

}  // namespace hawser
