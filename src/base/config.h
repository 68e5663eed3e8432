// Tunables: the values of the knobs of every table of the build (base/knob.h;
// the registry of tables: base/knob_registry.h).
//
// A value comes from set() (EngineOptions::config, or code), else from the
// knob's environment variable, else the table's default. Every read goes
// through a typed getter whose key is checked against its component's table
// when it is compiled: Config's own getters take keys of the base table
// (base/config_table.h), a transport reads its rows through
// TableConfig<its table> (e.g. TcpConfig, transport/tcp/tcp_config.h), which
// accepts only its own keys. The getter parses and range-checks the value and
// returns kInvalidArgument naming the key, its environment variable, the
// value and what was expected: a bad value never falls back to the default.
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
#include "base/knob.h"
#include "hawser/config.h"
#include "hawser/status.h"

namespace hawser {

// The typed getters over the keys of one table `Table`; `Derived` reads a
// row (Status readKnob(const Knob&, KnobValue&, ConfigSource*) const).
template <class Derived, const auto& Table>
class KnobGetters {
 public:
  using IntKeyT = TableKey<Table, kIntKnobs>;
  using SizeKeyT = TableKey<Table, kSizeKnobs>;
  using BoolKeyT = TableKey<Table, kBoolKnobs>;
  using StringKeyT = TableKey<Table, kStringKnobs>;

  // kInt and kDurationMs knobs; narrower integer types are fine (the table's
  // range fits the field: see each reader).
  Status getInt(IntKeyT key, int64_t& out) const {
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = v.number;
    return s;
  }
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, int64_t>)
  Status getInt(IntKeyT key, T& out) const {
    int64_t v = 0;
    Status s = getInt(key, v);
    if (s.ok()) out = static_cast<T>(v);
    return s;
  }
  Status getDuration(IntKeyT key, std::chrono::milliseconds& out) const {
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = std::chrono::milliseconds(v.number);
    return s;
  }
  Status getSize(SizeKeyT key, uint64_t& out) const {
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = static_cast<uint64_t>(v.number);
    return s;
  }
  Status getSize(SizeKeyT key, uint32_t& out) const {  // knobs whose range fits 32 bits
    if (key.row().hi > static_cast<int64_t>(UINT32_MAX)) return rangeTooWide(key.row());
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = static_cast<uint32_t>(v.number);
    return s;
  }
  Status getBool(BoolKeyT key, bool& out) const {
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = v.number != 0;
    return s;
  }
  Status getString(StringKeyT key, std::string& out) const {  // kString and kEnum
    KnobValue v;
    Status s = self().readKnob(key.row(), v, nullptr);
    if (s.ok()) out = std::move(v.text);
    return s;
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

// kInternal: a knob whose range does not fit 32 bits read into 32 bits.
Status rangeTooWide(const Knob& k);

class Config : public KnobGetters<Config, kKnobs> {
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

  // Sets `key` (any text: validate() refuses a key of no registered table).
  void set(std::string_view key, std::string value, ConfigSource source = ConfigSource::kOptions);

  // Every value set: kInvalidArgument for a key of no registered table
  // (base/knob_registry.h: a transport this build lacks has none) or a value
  // that does not parse or is out of range (the first one, by key order).
  Status validate() const;

  // Typed getters of the base table's keys: KnobGetters above.

  // The value of one row (a typed getter's, or a TableConfig's): set, else
  // the environment as it is now, else the default; parsed and range-checked.
  Status readKnob(const Knob& k, KnobValue& out, ConfigSource* source = nullptr) const;

  // By a key known only at run time (the public configValue(), tools):
  // kInvalidArgument for a key in no registered table or a bad value. `source`
  // (optional) says where the value came from.
  Status lookup(std::string_view key, KnobValue& out, ConfigSource* source = nullptr) const;

  // HAWSER_ + the key upper-cased, '.' -> '_' (the table's env names follow it).
  static std::string envName(std::string_view key);

 private:
  struct Entry {
    std::string value;
    ConfigSource source;
  };
  std::map<std::string, Entry, std::less<>> copy() const {
    std::lock_guard lk(mu_);
    return values_;
  }
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> values_;
};

// The typed getters of one component's table over a Config: a transport
// reads its own knobs through TableConfig<its table> (TcpConfig in
// transport/tcp/tcp_config.h), whose keys are checked against that table
// when they are compiled.
template <const auto& Table>
class TableConfig : public KnobGetters<TableConfig<Table>, Table> {
 public:
  explicit TableConfig(const Config& config) : config_(config) {}
  Status readKnob(const Knob& k, KnobValue& out, ConfigSource* source = nullptr) const {
    return config_.readKnob(k, out, source);
  }

 private:
  const Config& config_;
};

// Where a value came from, for messages: "the environment", "EngineOptions::config", "the default".
std::string_view sourceName(ConfigSource s);

}  // namespace hawser
