// A knob: one tunable of hawser, a row of a table of knobs.
//
// A knob has a key ("tcp.connections"), the environment variable that sets
// it (HAWSER_TCP_CONNECTIONS), a type, a default (written as a user would
// write it, and parsed by the same parser), a range (numeric types) or the
// allowed values (enums), and a one-line doc.
//
// Knowledge lives with its owner: the engine's, metadata's, gpu's and the
// Python binding's rows are base/config_table.h; each transport declares its
// own rows in its folder (src/transport/tcp/tcp_config.h: kTcpKnobs) and
// names them in its hawser_transport(... CONFIG kTcpKnobs) call, which puts
// the table in the engine's generated list of built-in transports. Tables
// meet in one process-wide registry (base/knob_registry.h), which the config
// system (base/config.h: validation, the environment, lookups by name),
// `hawser config` and the docs' tables (cmake/config_docs.cmake) read.
//
// This file is the machinery: the row, its parser, and keys checked against
// their table when they are compiled (TableKey).
#pragma once

#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>

#include "hawser/status.h"

namespace hawser {

enum class KnobType : uint8_t {
  kInt,         // decimal integer
  kSize,        // bytes: "4096", "64K", "1M", "2G", "1T" (binary units; "64KB", "1MiB" too)
  kBool,        // true/false, 1/0, yes/no, on/off (any case)
  kString,      // any text, "" included
  kEnum,        // one of `choices` (exact, lower case)
  kDurationMs,  // milliseconds, a decimal integer
};

struct Knob {
  std::string_view key;
  std::string_view env;
  KnobType type;
  std::string_view def;      // the default, as text
  int64_t lo = 0, hi = 0;    // kInt, kSize, kDurationMs: inclusive range
  std::string_view choices;  // kEnum: "a|b|c"
  std::string_view doc;
  bool secret = false;  // a password or token: `hawser config KEY` shows it masked
};

// A table of knobs and who owns it ("base", a transport's name).
struct KnobTable {
  std::string_view owner;
  std::span<const Knob> rows;
};

namespace knob_detail {
inline constexpr int64_t K = 1ll << 10, M = 1ll << 20, G = 1ll << 30, T = 1ll << 40;
inline constexpr int64_t kHour = 3600000;
}  // namespace knob_detail

// The row of `key` in `rows`; nullptr when none is. Usable at compile time
// (static_assert(findKnobIn(kTcpKnobs, "tcp.max_frame")->hi == ...)).
constexpr const Knob* findKnobIn(std::span<const Knob> rows, std::string_view key) {
  for (const Knob& k : rows)
    if (k.key == key) return &k;
  return nullptr;
}

// The first key or environment name that two rows of `tables` share, "" when
// none (a compile-time check of the build's tables: the generated list of
// built-in transports, src/engine/CMakeLists.txt; the registry checks the
// tables added at run time).
constexpr std::string_view firstSharedKnobName(std::span<const KnobTable> tables) {
  for (size_t a = 0; a < tables.size(); ++a)
    for (size_t i = 0; i < tables[a].rows.size(); ++i)
      for (size_t b = a; b < tables.size(); ++b)
        for (size_t j = (b == a ? i + 1 : 0); j < tables[b].rows.size(); ++j) {
          if (tables[a].rows[i].key == tables[b].rows[j].key) return tables[a].rows[i].key;
          if (tables[a].rows[i].env == tables[b].rows[j].env) return tables[a].rows[i].env;
        }
  return {};
}

constexpr unsigned knobBit(KnobType t) { return 1u << static_cast<unsigned>(t); }
inline constexpr unsigned kIntKnobs = knobBit(KnobType::kInt) | knobBit(KnobType::kDurationMs);
inline constexpr unsigned kSizeKnobs = knobBit(KnobType::kSize);
inline constexpr unsigned kBoolKnobs = knobBit(KnobType::kBool);
inline constexpr unsigned kStringKnobs = knobBit(KnobType::kString) | knobBit(KnobType::kEnum);

// A key of the table `Table` (an array of Knob with static storage), checked
// when it is compiled: TableKey<kTcpKnobs, kIntKnobs> k = "tcp.connections".
// `Types` is a bit set of the KnobTypes the reader accepts (the getter's).
// A component reads only the keys of its own table (a transport cannot read
// another's knobs: base/config.h TableConfig).
// (It keeps the row's index, not a pointer: GCC's UBSan instrumentation makes
// a pointer comparison inside a consteval constructor non-constant.)
template <const auto& Table, unsigned Types>
struct TableKey {
  static constexpr size_t indexOf(std::string_view key) {
    for (size_t i = 0; i < std::size(Table); ++i)
      if (Table[i].key == key) return i;
    return std::size(Table);
  }
  consteval TableKey(const char* key) : index(indexOf(key)) {  // NOLINT: implicit by design
    if (index == std::size(Table))
      throw "config key is not in this component's table (its *_config.h, or src/base/config_table.h)";
    if ((Types & knobBit(Table[index].type)) == 0)
      throw "config key read with a getter of the wrong type (see its KnobType in the table)";
  }
  const Knob& row() const { return Table[index]; }
  size_t index;
};

// "int", "size", "bool", "string", "enum", "duration_ms".
std::string_view knobTypeName(KnobType t);
// The default / range as `hawser config` prints them ("64M", "4K..1G",
// "auto|uring|posix"; "" for bool and string).
std::string knobDefaultText(const Knob& k);
std::string knobRangeText(const Knob& k);
// What a value must be: "an integer in [1, 64]", "one of auto, uring, posix".
std::string knobExpected(const Knob& k);

// The value of a knob after parsing.
struct KnobValue {
  int64_t number = 0;  // kInt, kSize, kDurationMs, kBool (0/1)
  std::string text;    // kString, kEnum: the value
};

// Parses `text` as `k` says and checks its range. kInvalidArgument names the
// key, its environment variable, the value, where it came from (`origin`:
// "the environment", "EngineOptions::config") and what was expected.
Status parseKnob(const Knob& k, std::string_view text, std::string_view origin, KnobValue& out);

}  // namespace hawser
