// Logging: spdlog behind a few macros. Level from HAWSER_LOG_LEVEL
// (trace|debug|info|warn|error|off, default warn).
#pragma once

#include <spdlog/spdlog.h>

namespace hawser {
spdlog::logger& logger();
}  // namespace hawser

#define HLOG_TRACE(...) SPDLOG_LOGGER_TRACE(&::hawser::logger(), __VA_ARGS__)
#define HLOG_DEBUG(...) SPDLOG_LOGGER_DEBUG(&::hawser::logger(), __VA_ARGS__)
#define HLOG_INFO(...) SPDLOG_LOGGER_INFO(&::hawser::logger(), __VA_ARGS__)
#define HLOG_WARN(...) SPDLOG_LOGGER_WARN(&::hawser::logger(), __VA_ARGS__)
#define HLOG_ERROR(...) SPDLOG_LOGGER_ERROR(&::hawser::logger(), __VA_ARGS__)
