#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

namespace hawser {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = std::make_shared<spdlog::logger>("hawser", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    const char* lvl = std::getenv("HAWSER_LOG_LEVEL");
    l->set_level(lvl ? spdlog::level::from_str(lvl) : spdlog::level::warn);
    l->set_pattern("[%H:%M:%S.%e] [hawser] [%^%l%$] %v");
    return l;
  }();
  return *log;
}

}  // namespace hawser
