// The knobs' parser and descriptions (base/knob.h).
#include "base/knob.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "hawser/config.h"

namespace hawser {

namespace {

std::string_view trim(std::string_view t) {
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  return t;
}

std::string lower(std::string_view t) {
  std::string s;
  for (char c : t) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// 4096 -> "4K", 3 << 30 -> "3G", 1000 -> "1000".
std::string sizeText(int64_t v) {
  static constexpr std::pair<int64_t, char> kUnits[] = {
      {knob_detail::T, 'T'}, {knob_detail::G, 'G'}, {knob_detail::M, 'M'}, {knob_detail::K, 'K'}};
  if (v > 0)
    for (auto [unit, c] : kUnits)
      if (v % unit == 0) return fmt::format("{}{}", v / unit, c);
  return std::to_string(v);
}

std::string choicesList(std::string_view choices, std::string_view sep) {
  std::string out;
  size_t start = 0;
  while (start <= choices.size()) {
    size_t bar = choices.find('|', start);
    if (bar == std::string_view::npos) bar = choices.size();
    if (!out.empty()) out += sep;
    out += choices.substr(start, bar - start);
    start = bar + 1;
  }
  return out;
}

bool isChoice(std::string_view choices, std::string_view v) {
  size_t start = 0;
  while (start <= choices.size()) {
    size_t bar = choices.find('|', start);
    if (bar == std::string_view::npos) bar = choices.size();
    if (choices.substr(start, bar - start) == v) return true;
    start = bar + 1;
  }
  return false;
}

}  // namespace

std::string_view knobTypeName(KnobType t) {
  switch (t) {
    case KnobType::kInt: return "int";
    case KnobType::kSize: return "size";
    case KnobType::kBool: return "bool";
    case KnobType::kString: return "string";
    case KnobType::kEnum: return "enum";
    case KnobType::kDurationMs: return "duration_ms";
  }
  return "?";
}

std::string knobDefaultText(const Knob& k) { return std::string(k.def); }

std::string knobRangeText(const Knob& k) {
  switch (k.type) {
    case KnobType::kInt:
    case KnobType::kDurationMs: return fmt::format("{}..{}", k.lo, k.hi);
    case KnobType::kSize: return fmt::format("{}..{}", sizeText(k.lo), sizeText(k.hi));
    case KnobType::kEnum: return std::string(k.choices);
    case KnobType::kBool:
    case KnobType::kString: return "";
  }
  return "";
}

std::string knobExpected(const Knob& k) {
  switch (k.type) {
    case KnobType::kInt: return fmt::format("an integer in [{}, {}]", k.lo, k.hi);
    case KnobType::kDurationMs: return fmt::format("a duration in milliseconds in [{}, {}]", k.lo, k.hi);
    case KnobType::kSize:
      return fmt::format("a size in [{}, {}] (bytes, K/M/G/T suffixes)", sizeText(k.lo), sizeText(k.hi));
    case KnobType::kBool: return "true or false (1/0, yes/no, on/off)";
    case KnobType::kEnum: return "one of " + choicesList(k.choices, ", ");
    case KnobType::kString: return "a string";
  }
  return "?";
}

Status parseKnob(const Knob& k, std::string_view text, std::string_view origin, KnobValue& out) {
  auto bad = [&] {
    return Status(Code::kInvalidArgument, fmt::format("config {} (env {}) = '{}' from {}: expected {}", k.key, k.env,
                                                      text, origin, knobExpected(k)));
  };
  KnobValue v;
  std::string_view t = trim(text);
  switch (k.type) {
    case KnobType::kString:
      v.text = std::string(text);
      break;
    case KnobType::kEnum: {
      std::string l = lower(t);
      if (!isChoice(k.choices, l)) return bad();
      v.text = l;
      break;
    }
    case KnobType::kBool: {
      std::string l = lower(t);
      if (l == "1" || l == "true" || l == "yes" || l == "on") {
        v.number = 1;
      } else if (l == "0" || l == "false" || l == "no" || l == "off") {
        v.number = 0;
      } else {
        return bad();
      }
      v.text = v.number ? "true" : "false";
      break;
    }
    case KnobType::kInt:
    case KnobType::kDurationMs: {
      int64_t x = 0;
      auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
      if (t.empty() || ec != std::errc() || p != t.data() + t.size() || x < k.lo || x > k.hi) return bad();
      v.number = x;
      v.text = std::to_string(x);
      break;
    }
    case KnobType::kSize: {
      auto s = parseSize(t);
      if (!s || *s > static_cast<uint64_t>(k.hi) || static_cast<int64_t>(*s) < k.lo) return bad();
      v.number = static_cast<int64_t>(*s);
      v.text = std::string(t);
      break;
    }
  }
  out = std::move(v);
  return Status::OK();
}

}  // namespace hawser
