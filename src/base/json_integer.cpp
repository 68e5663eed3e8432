#include "base/json_integer.h"

#include <fmt/format.h>

namespace hawser::json_integer_detail {

namespace {

std::string shown(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

}  // namespace

Status read(const nlohmann::json& v, std::string_view field, int64_t lo, uint64_t hi, uint64_t& bits) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x > hi) return {Code::kInvalidArgument, fmt::format("{} is out of range: {} is not in [{}, {}]", field, x, lo, hi)};
    bits = x;
    return Status::OK();
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    const bool fits = x < 0 ? x >= lo : static_cast<uint64_t>(x) <= hi;
    if (!fits) return {Code::kInvalidArgument, fmt::format("{} is out of range: {} is not in [{}, {}]", field, x, lo, hi)};
    bits = static_cast<uint64_t>(x);
    return Status::OK();
  }
  return {Code::kInvalidArgument, fmt::format("{} must be an integer, got {}", field, shown(v))};
}

std::string fieldName(std::string_view where, std::string_view key) {
  return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}

Status missing(std::string_view field) { return {Code::kInvalidArgument, fmt::format("{} is missing", field)}; }

}  // namespace hawser::json_integer_detail
