#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

#include "base/config.h"

namespace hawser {

namespace {

spdlog::level::level_enum levelOf(const std::string& name) {
  // The table's choices: trace|debug|info|warn|error|off.
  return spdlog::level::from_str(name);
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = std::make_shared<spdlog::logger>("hawser", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    // Before any engine applies log.level: the environment's, if valid (a bad
    // one fails the engine's init), else the table's default.
    std::string level;
    if (!Config().getString("log.level", level).ok()) level = std::string(findKnobIn(kKnobs, "log.level")->def);
    l->set_level(levelOf(level));
    l->set_pattern("[%H:%M:%S.%e] [hawser] [%^%l%$] %v");
    return l;
  }();
  return *log;
}

Status applyLogLevel(const Config& config) {
  std::string level;
  Status s = config.getString("log.level", level);
  if (!s.ok()) return s;
  logger().set_level(levelOf(level));
  return Status::OK();
}

void warnUnknownEnvOnce(const std::vector<std::string>& names) {
  static std::mutex mu;
  static std::set<std::string> warned;
  for (const auto& n : names) {
    {
      std::lock_guard lk(mu);
      if (!warned.insert(n).second) continue;
    }
    HLOG_WARN("environment variable {} is not a hawser config key: ignored (`hawser config` lists the keys)", n);
  }
}

}  // namespace hawser
