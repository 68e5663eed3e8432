// Tunables: the values of the knobs of the config table (base/config_table.h).
//
// A value comes from set() (EngineOptions::config, or code), else from the
// knob's environment variable, else the table's default. Every read goes
// through a typed getter whose key is checked against the table when it is
// compiled; the getter parses and range-checks the value and returns
// kInvalidArgument naming the key, its environment variable, the value and
// what was expected: a bad value never falls back to the default.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/config_table.h"
#include "hawser/config.h"
#include "hawser/status.h"

namespace hawser {

class Config {
 public:
  Config() = default;
  Config(const Config& o) : values_(o.copy()) {}
  Config& operator=(const Config& o) {
    if (this != &o) {
      auto v = o.copy();
      std::lock_guard lk(mu_);
      values_ = std::move(v);
    }
    return *this;
  }

  // The environment variables of every knob, as set now. `unknown`, when
  // given, receives each HAWSER_* variable of the environment that is no
  // knob's (other programs may set HAWSER_ variables: not an error).
  static Config fromEnv(std::vector<std::string>* unknown = nullptr);
  // The same over an environment block given as `environ` is (NAME=VALUE
  // strings, null-terminated); fuzzed by tests/fuzz/config_fuzz.cpp.
  static Config fromEnv(const char* const* env, std::vector<std::string>* unknown);

  // Sets `key` (any text: validate() refuses a key that is not in the table).
  void set(std::string_view key, std::string value, ConfigSource source = ConfigSource::kOptions);

  // Every value set: kInvalidArgument for a key not in the table or a value
  // that does not parse or is out of range (the first one, by key order).
  Status validate() const;

  // Typed getters. IntKey reads kInt and kDurationMs knobs; narrower integer
  // types are fine (the table's range fits the field: see each reader).
  Status getInt(IntKey key, int64_t& out) const;
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, int64_t>)
  Status getInt(IntKey key, T& out) const {
    int64_t v = 0;
    Status s = getInt(key, v);
    if (s.ok()) out = static_cast<T>(v);
    return s;
  }
  Status getDuration(IntKey key, std::chrono::milliseconds& out) const;
  Status getSize(SizeKey key, uint64_t& out) const;
  Status getSize(SizeKey key, uint32_t& out) const;  // knobs whose range fits 32 bits
  Status getBool(BoolKey key, bool& out) const;
  Status getString(StringKey key, std::string& out) const;  // kString and kEnum

  // By a key known only at run time (the public configValue(), tools):
  // kInvalidArgument for a key not in the table or a bad value. `source`
  // (optional) says where the value came from.
  Status lookup(std::string_view key, KnobValue& out, ConfigSource* source = nullptr) const;

  // HAWSER_ + the key upper-cased, '.' -> '_' (the table's env names follow it).
  static std::string envName(std::string_view key);

 private:
  struct Entry {
    std::string value;
    ConfigSource source;
  };
  Status read(const Knob& k, KnobValue& out, ConfigSource* source) const;
  std::map<std::string, Entry, std::less<>> copy() const {
    std::lock_guard lk(mu_);
    return values_;
  }
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> values_;
};

// Where a value came from, for messages: "the environment", "EngineOptions::config", "the default".
std::string_view sourceName(ConfigSource s);

}  // namespace hawser
