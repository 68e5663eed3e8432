// hawser — configuration of the public API.
//
// Every tunable is a key of the config system ("tcp.connections"), with an
// environment variable (HAWSER_TCP_CONNECTIONS), a type, a default, a range
// and a one-line doc: configKeys() lists them, `hawser config` prints them,
// docs/config.md holds the table. Give values to an engine with
// EngineOptions::config (hawser/engine.h, wins) or the environment.
// TransferEngine::init() validates every value from both before anything
// starts: an unknown key in EngineOptions::config, or a value that does not
// parse or is out of range, fails it with kInvalidArgument naming the key,
// its environment variable, the value and what was expected. A HAWSER_*
// environment variable that is no key is logged once as a warning and
// otherwise ignored (other programs may use the prefix).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hawser/status.h"

namespace hawser {

struct EngineOptions;  // hawser/engine.h

// Parses a byte size: "4096", "64K", "1M", "2G", "1T" (binary units; "64KB",
// "1MiB" too). nullopt on junk or overflow.
std::optional<uint64_t> parseSize(std::string_view text);

// One row of the config table.
struct ConfigKey {
  std::string key;            // "tcp.connections"
  std::string env;            // "HAWSER_TCP_CONNECTIONS"
  std::string type;           // "int", "size", "bool", "string", "enum", "duration_ms"
  std::string default_value;  // as a user writes it: "2", "64M", "true", "auto", "" (empty string)
  std::string range;          // "1..64", "4K..1G", "auto|tcp|rdma" (enum), "" (bool, string)
  std::string doc;
  bool secret = false;  // a password or token: shown masked by `hawser config KEY`
};

// Every key of this build, grouped by component: the engine's and its
// layers' first, then each transport's (in the build's order).
std::vector<ConfigKey> configKeys();

// Where an effective value comes from.
enum class ConfigSource { kDefault, kEnvironment, kOptions };

// The effective value of `key` for an engine initialized with `options`:
// options.config, else the environment variable, else the default, validated
// as init() validates it. kInvalidArgument for a key not in the table or a
// bad value (the message names key, env, value and what was expected).
// `source` (optional) receives where the value came from.
//   configValue: the text (enums and strings; any type as written, or the default).
//   configInt: int, duration_ms and size keys (sizes in bytes).
//   configBool: bool keys.
Status configValue(const std::string& key, const EngineOptions& options, std::string& out,
                   ConfigSource* source = nullptr);
Status configInt(const std::string& key, const EngineOptions& options, int64_t& out, ConfigSource* source = nullptr);
Status configBool(const std::string& key, const EngineOptions& options, bool& out, ConfigSource* source = nullptr);

// Validates every value of options.config and of the environment, as init()
// does first (without the warnings about unknown HAWSER_* variables).
Status validateConfig(const EngineOptions& options);

}  // namespace hawser
