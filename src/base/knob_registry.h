// The registry of knob tables: every tunable of this process.
//
// The base table (base/config_table.h) is always in it; the generated list
// of built-in transports (src/engine/CMakeLists.txt) adds each transport's
// table when the library is loaded, and a transport registered at run time
// (engine/transport_list.h TransportFactory::knobs) adds its own for as long
// as it is registered. So the set of keys is the base rows plus the rows of
// every transport of the build: a key of a transport this build lacks is
// unknown. Config (validation, the environment, lookups by name), the public
// configKeys() behind `hawser config`, and the docs' tables read it.
//
// Thread-safe. Rows are never copied: a Knob* stays valid while its table is
// registered (the built-in ones: for the life of the process).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/knob.h"
#include "hawser/status.h"

namespace hawser {

// A registered table: its owner (a copy: `table.owner` of the registration
// need not outlive it) and its rows.
struct RegisteredKnobTable {
  std::string owner;
  std::span<const Knob> rows;
};

// Adds `table`. kInvalidArgument, and nothing added, when its owner is
// empty or already registered, or one of its keys or environment names is
// already another table's (or appears twice in it): the message names it.
Status registerKnobTable(KnobTable table);
// Removes the table of `owner` (the base table stays); false when none is.
bool unregisterKnobTable(std::string_view owner);

// Every table: base first, then in the order they were added.
std::vector<RegisteredKnobTable> knobTables();
// Every row of every table, in that order.
std::vector<const Knob*> allKnobs();

// The row of `key` / of the environment variable `env` in any table;
// nullptr when none has it.
const Knob* findKnob(std::string_view key);
const Knob* findKnobByEnv(std::string_view env);

}  // namespace hawser
