// Config values from the environment (src/base/config.h): any HAWSER_*
// variable's text reaches the knob's parser. The input is an environment
// block (NAME=VALUE entries separated by NUL bytes); its first byte picks a
// knob whose parser also gets the rest of the input as a value.
// Invariants: a value either parses within the knob's range or is refused
// with kInvalidArgument naming the key; a parsed value's normal form parses
// to the same value; every knob reads back from the environment as
// validate() judged it.
#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/knob_registry.h"
#include "fuzz_util.h"

using namespace hawser;

namespace {

void checkValue(const Knob& k, std::string_view text) {
  KnobValue v;
  Status s = parseKnob(k, text, "the fuzzer", v);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Code::kInvalidArgument && s.message().find(k.key) != std::string::npos);
    return;
  }
  if (k.type == KnobType::kInt || k.type == KnobType::kSize || k.type == KnobType::kDurationMs)
    FUZZ_CHECK(v.number >= k.lo && v.number <= k.hi);
  KnobValue again;
  FUZZ_CHECK(parseKnob(k, v.text, "the fuzzer", again).ok());
  FUZZ_CHECK(again.number == v.number && again.text == v.text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const std::vector<const Knob*> table = allKnobs();  // every registered table's rows
  const Knob& k = *table[in.take<uint8_t>() % table.size()];
  const std::string_view all = in.rest();
  checkValue(k, all);
  if (auto n = parseSize(all)) {
    const std::string text = std::to_string(*n);
    FUZZ_CHECK(parseSize(text) == n);
  }
  // The environment block.
  std::vector<std::string> entries;
  for (size_t pos = 0; pos <= all.size();) {
    size_t end = all.find('\0', pos);
    if (end == std::string_view::npos) end = all.size();
    entries.emplace_back(all.substr(pos, end - pos));
    pos = end + 1;
  }
  std::vector<const char*> env;
  for (auto& e : entries) env.push_back(e.c_str());
  env.push_back(nullptr);
  std::vector<std::string> unknown;
  Config c = Config::fromEnv(env.data(), &unknown);
  for (const auto& u : unknown) FUZZ_CHECK(u.starts_with("HAWSER_"));
  const bool valid = c.validate().ok();
  bool all_ok = true;
  for (const Knob* row : table) {
    const Knob& each = *row;
    KnobValue v;
    ConfigSource src = ConfigSource::kDefault;
    Status s = c.lookup(each.key, v, &src);
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Code::kInvalidArgument);
      if (src == ConfigSource::kEnvironment) all_ok = false;
    }
  }
  // validate() judges the values set from the block; lookups may also see
  // the process environment, which holds no HAWSER_* variable here.
  if (valid) FUZZ_CHECK(all_ok);
  return 0;
}
