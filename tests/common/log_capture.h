// Captures what the engine logs (at info and above) while it lives, for
// tests that pin a reason which is only logged (a transport left out at
// init). Restores the logger's level and sinks at destruction.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"

namespace hawser::test {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)), level_(logger().level()) {
    sink_->set_pattern("%v");
    // The other sinks keep showing only what they showed before.
    for (auto& s : logger().sinks()) {
      saved_.emplace_back(s, s->level());
      if (s->level() < level_) s->set_level(level_);
    }
    logger().sinks().push_back(sink_);
    if (level_ > spdlog::level::info) logger().set_level(spdlog::level::info);
  }
  ~LogCapture() {
    auto& sinks = logger().sinks();
    for (auto it = sinks.begin(); it != sinks.end(); ++it)
      if (*it == sink_) {
        sinks.erase(it);
        break;
      }
    for (auto& [s, l] : saved_) s->set_level(l);
    logger().set_level(level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() {
    logger().flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
  std::vector<std::pair<spdlog::sink_ptr, spdlog::level::level_enum>> saved_;
};

}  // namespace hawser::test
