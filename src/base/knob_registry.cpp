#include "base/knob_registry.h"

#include <fmt/format.h>

#include <mutex>

#include "base/config_table.h"

namespace hawser {

namespace {

struct KnobTables {
  std::mutex mu;
  std::vector<RegisteredKnobTable> tables{RegisteredKnobTable{"base", kKnobs}};
};

KnobTables& knobTableRegistry() {
  static KnobTables r;
  return r;
}

}  // namespace

Status registerKnobTable(KnobTable table) {
  if (table.owner.empty()) return {Code::kInvalidArgument, "knob table without an owner"};
  KnobTables& r = knobTableRegistry();
  std::lock_guard lk(r.mu);
  for (const RegisteredKnobTable& t : r.tables)
    if (t.owner == table.owner)
      return {Code::kInvalidArgument, fmt::format("knob table of '{}' is already registered", table.owner)};
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const Knob& k = table.rows[i];
    for (size_t j = 0; j < i; ++j)
      if (table.rows[j].key == k.key || table.rows[j].env == k.env)
        return {Code::kInvalidArgument,
                fmt::format("knob table of '{}' holds config key {} (env {}) twice", table.owner, k.key, k.env)};
    for (const RegisteredKnobTable& t : r.tables)
      for (const Knob& o : t.rows)
        if (o.key == k.key || o.env == k.env)
          return {Code::kInvalidArgument,
                  fmt::format("knob table of '{}': config key {} (env {}) is already {}'s ({}, env {})", table.owner,
                              k.key, k.env, t.owner, o.key, o.env)};
  }
  r.tables.push_back({std::string(table.owner), table.rows});
  return Status::OK();
}

bool unregisterKnobTable(std::string_view owner) {
  if (owner == "base") return false;
  KnobTables& r = knobTableRegistry();
  std::lock_guard lk(r.mu);
  return std::erase_if(r.tables, [&](const RegisteredKnobTable& t) { return t.owner == owner; }) > 0;
}

std::vector<RegisteredKnobTable> knobTables() {
  KnobTables& r = knobTableRegistry();
  std::lock_guard lk(r.mu);
  return r.tables;
}

std::vector<const Knob*> allKnobs() {
  std::vector<const Knob*> out;
  for (const RegisteredKnobTable& t : knobTables())
    for (const Knob& k : t.rows) out.push_back(&k);
  return out;
}

const Knob* findKnob(std::string_view key) {
  KnobTables& r = knobTableRegistry();
  std::lock_guard lk(r.mu);
  for (const RegisteredKnobTable& t : r.tables)
    if (const Knob* k = findKnobIn(t.rows, key)) return k;
  return nullptr;
}

const Knob* findKnobByEnv(std::string_view env) {
  KnobTables& r = knobTableRegistry();
  std::lock_guard lk(r.mu);
  for (const RegisteredKnobTable& t : r.tables)
    for (const Knob& k : t.rows)
      if (k.env == env) return &k;
  return nullptr;
}

}  // namespace hawser
