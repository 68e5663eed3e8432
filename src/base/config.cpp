#include "base/config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "base/knob_registry.h"

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
  if (const Knob* k = findKnob(key)) return std::string(k->env);
  std::string out = "HAWSER_";
  for (char c : key) out += (c == '.' || c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string_view sourceName(ConfigSource s) {
  switch (s) {
    case ConfigSource::kDefault: return "the default";
    case ConfigSource::kEnvironment: return "the environment";
    case ConfigSource::kOptions: return "EngineOptions::config";
  }
  return "?";
}

Config Config::fromEnv(std::vector<std::string>* unknown) { return fromEnv(environ, unknown); }

Config Config::fromEnv(const char* const* env, std::vector<std::string>* unknown) {
  Config c;
  for (const char* const* e = env; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, 7) != "HAWSER_") continue;
    // The test tools' own variables (tests/, scripts/) are not config keys.
    if (kv.starts_with("HAWSER_TEST_") || kv.starts_with("HAWSER_SOFTVERBS_") || kv.starts_with("HAWSER_FAKE_"))
      continue;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = kv.substr(0, eq);
    if (const Knob* k = findKnobByEnv(name)) {
      c.values_[std::string(k->key)] = Entry{std::string(kv.substr(eq + 1)), ConfigSource::kEnvironment};
    } else if (unknown) {
      unknown->emplace_back(name);
    }
  }
  return c;
}

void Config::set(std::string_view key, std::string value, ConfigSource source) {
  std::lock_guard lk(mu_);
  values_[std::string(key)] = Entry{std::move(value), source};
}

Status Config::validate() const {
  for (auto& [key, e] : copy()) {
    const Knob* k = findKnob(key);
    if (!k)
      return {Code::kInvalidArgument,
              fmt::format("config key '{}' from {} is not a hawser key (`hawser config` lists them)", key,
                          sourceName(e.source))};
    KnobValue v;
    Status s = parseKnob(*k, e.value, sourceName(e.source), v);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status Config::readKnob(const Knob& k, KnobValue& out, ConfigSource* source) const {
  std::optional<Entry> e;
  {
    std::lock_guard lk(mu_);
    auto it = values_.find(k.key);
    if (it != values_.end()) e = it->second;
  }
  // Not set: the environment as it is now (a Config built without fromEnv()
  // still sees HAWSER_*), else the default.
  if (!e) {
    if (const char* v = std::getenv(std::string(k.env).c_str())) e = Entry{v, ConfigSource::kEnvironment};
  }
  if (!e) e = Entry{std::string(k.def), ConfigSource::kDefault};
  if (source) *source = e->source;
  return parseKnob(k, e->value, sourceName(e->source), out);
}

Status Config::lookup(std::string_view key, KnobValue& out, ConfigSource* source) const {
  const Knob* k = findKnob(key);
  if (!k)
    return {Code::kInvalidArgument, fmt::format("config key '{}' is not a hawser key (`hawser config` lists them)", key)};
  return readKnob(*k, out, source);
}

Status rangeTooWide(const Knob& k) {
  return {Code::kInternal, fmt::format("config {}: range up to {} read into 32 bits", k.key, k.hi)};
}

}  // namespace hawser
