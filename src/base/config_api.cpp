// The public config API (hawser/config.h) over the registry of every knob
// table of this build (base/knob_registry.h).
#include <fmt/format.h>

#include "base/config.h"
#include "base/knob_registry.h"
#include "hawser/config.h"
#include "hawser/engine.h"

namespace hawser {

// ---- public API (hawser/config.h) ---------------------------------------------------------------

std::vector<ConfigKey> configKeys() {
  std::vector<ConfigKey> out;
  for (const Knob* row : allKnobs()) {
    const Knob& k = *row;
    out.push_back({std::string(k.key), std::string(k.env), std::string(knobTypeName(k.type)), knobDefaultText(k),
                   knobRangeText(k), std::string(k.doc), k.secret});
  }
  return out;
}

namespace {

Config effectiveConfig(const EngineOptions& options) {
  Config c = Config::fromEnv();
  for (auto& [k, v] : options.config) c.set(k, v, ConfigSource::kOptions);
  return c;
}

Status lookupTyped(const std::string& key, const EngineOptions& options, std::initializer_list<KnobType> types,
                   std::string_view want, KnobValue& out, ConfigSource* source) {
  const Knob* k = findKnob(key);
  if (!k) return {Code::kInvalidArgument, fmt::format("config key '{}' is not a hawser key (`hawser config` lists them)", key)};
  bool ok = false;
  for (KnobType t : types) ok |= k->type == t;
  if (!ok)
    return {Code::kInvalidArgument,
            fmt::format("config key '{}' is of type {}, not {}", key, knobTypeName(k->type), want)};
  return effectiveConfig(options).lookup(key, out, source);
}

}  // namespace

Status configValue(const std::string& key, const EngineOptions& options, std::string& out, ConfigSource* source) {
  KnobValue v;
  Status s = lookupTyped(key, options,
                         {KnobType::kInt, KnobType::kSize, KnobType::kBool, KnobType::kString, KnobType::kEnum,
                          KnobType::kDurationMs},
                         "", v, source);
  if (s.ok()) out = v.text;
  return s;
}

Status configInt(const std::string& key, const EngineOptions& options, int64_t& out, ConfigSource* source) {
  KnobValue v;
  Status s = lookupTyped(key, options, {KnobType::kInt, KnobType::kSize, KnobType::kDurationMs},
                         "int, size or duration_ms", v, source);
  if (s.ok()) out = v.number;
  return s;
}

Status configBool(const std::string& key, const EngineOptions& options, bool& out, ConfigSource* source) {
  KnobValue v;
  Status s = lookupTyped(key, options, {KnobType::kBool}, "bool", v, source);
  if (s.ok()) out = v.number != 0;
  return s;
}

Status validateConfig(const EngineOptions& options) { return effectiveConfig(options).validate(); }

}  // namespace hawser
