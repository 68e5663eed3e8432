// Logging: spdlog behind a few macros. Level: config log.level
// (HAWSER_LOG_LEVEL: trace|debug|info|warn|error|off, default warn), read
// from the environment at the first log line and applied again by every
// engine's init (EngineOptions::config wins there).
#pragma once

#include <spdlog/spdlog.h>

#include <set>
#include <string>
#include <vector>

#include "hawser/status.h"

namespace hawser {
class Config;

spdlog::logger& logger();
// Sets the process's log level from config log.level (validated).
Status applyLogLevel(const Config& config);
// Logs a warning for each name not warned about before in this process.
void warnUnknownEnvOnce(const std::vector<std::string>& names);
}  // namespace hawser

#define HLOG_TRACE(...) SPDLOG_LOGGER_TRACE(&::hawser::logger(), __VA_ARGS__)
#define HLOG_DEBUG(...) SPDLOG_LOGGER_DEBUG(&::hawser::logger(), __VA_ARGS__)
#define HLOG_INFO(...) SPDLOG_LOGGER_INFO(&::hawser::logger(), __VA_ARGS__)
#define HLOG_WARN(...) SPDLOG_LOGGER_WARN(&::hawser::logger(), __VA_ARGS__)
#define HLOG_ERROR(...) SPDLOG_LOGGER_ERROR(&::hawser::logger(), __VA_ARGS__)
