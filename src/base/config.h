// Tunables. Each has a key ("tcp.connections"), an environment override
// (HAWSER_TCP_CONNECTIONS: upper-case, '.' -> '_', HAWSER_ prefix) and a
// documented default given at the point of use. Explicit set() wins over env.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "hawser/config.h"

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

  // Reads HAWSER_* from the environment.
  static Config fromEnv();

  void set(std::string_view key, std::string value);
  std::optional<std::string> raw(std::string_view key) const;

  std::string getString(std::string_view key, std::string_view def) const;
  int64_t getInt(std::string_view key, int64_t def) const;
  // Accepts K/M/G (binary) suffixes: "64K", "1M".
  uint64_t getSize(std::string_view key, uint64_t def) const;
  bool getBool(std::string_view key, bool def) const;

  static std::string envName(std::string_view key);

 private:
  std::map<std::string, std::string, std::less<>> copy() const {
    std::lock_guard lk(mu_);
    return values_;
  }
  mutable std::mutex mu_;
  std::map<std::string, std::string, std::less<>> values_;
};


}  // namespace hawser
